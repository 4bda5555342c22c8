"""The tests of dataset_client and dataset_client_cli beyond the interface's operations, by concern.

support.py holds what the modules share (servers, fault primitives, base cases, the parallel
runner); each test_*.py module holds one concern. `python3 -m unittest` from the repository's
root runs them all, with ../test_dataset_client.py, in one set of workers.
"""
