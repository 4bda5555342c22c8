"""The download and command-line tests once more, as on a platform without ``os.pwrite``,
``os.pread``, ``fcntl``, ``os.register_at_fork`` and ``signal.SIGHUP`` (Windows, which CI cannot run).

Those names are removed before anything imports dataset_client, in the test process and in
every Python it starts (the CLI tests run ``python -m dataset_client``), by a
``sitecustomize`` module put first on ``PYTHONPATH``.

    python3 .ci/without_posix_extras.py                 # the tests in TESTS
    python3 .ci/without_posix_extras.py ResumeTests     # or only these
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

# The download and CLI tests (a class, or Class.test_name), of any test module: add or drop
# names here.
TESTS = [
    "DownloadTests",
    "DestinationTests.test_a_character_device_is_written_not_replaced",
    "DestinationTests.test_a_failing_final_move_leaves_nothing",
    "DestinationTests.test_a_fifo_is_written_not_replaced",
    "DestinationTests.test_a_long_file_name_works",
    "DestinationTests.test_a_stream_that_accepts_nothing_is_an_error_not_a_busy_loop",
    "ResumeTests.test_a_file_object_gets_bytes_it_may_keep",
    "ResumeTests.test_a_malformed_content_range_is_refused_resumed_or_in_parts",
    "ResumeTests.test_a_malformed_content_range_of_another_version_starts_over",
    "ResumeTests.test_a_resumed_part_without_a_length_is_checked_against_the_total",
    "ResumeTests.test_a_server_ignoring_range_starts_over",
    "DownloadRetryTests.test_a_server_trickling_a_byte_per_attempt_exhausts_the_retries",
    "DownloadRetryTests.test_no_progress_exhausts_the_retries",
    "ResumeTests.test_no_validator_means_no_range",
    "DownloadRetryTests.test_progress_resets_the_retry_count",
    "ResumeTests.test_resume_after_cuts_at_several_offsets",
    "ResumeTests.test_resume_uses_last_modified_without_a_strong_etag",
    "ResumeTests.test_starting_over_rewinds_a_file_object",
    "ResumeTests.test_wrong_content_range_is_an_error",
    "ResumeAcrossRunsTests",
    "ParallelDownloadTests",
    "StateFileTests",
    "ResumeTests.test_a_206_of_unknown_total_is_never_spliced_on",
    "FramingTests.test_a_206_without_content_range_is_an_invalid_response",
    "DownloadRetryTests.test_a_cut_head_on_a_parts_request_is_retried",
    "FramingTests.test_a_flood_of_interim_responses_is_refused",
    "FramingTests.test_a_head_cut_off_before_its_blank_line_is_an_incomplete_response",
    "BodyBoundsTests.test_an_endless_body_or_one_in_tiny_chunks_in_a_child_under_a_memory_limit",
    "DownloadFaultTests",
    "SharedDirectoryTests",
    "OtherUsersFileTests",
    "FifoAndDescriptorTests",
    "DestinationTests.test_a_file_not_of_the_announced_size_is_not_committed_and_the_error_has_both_sizes",
    "LockFileTests",
    "EchoedSecretTests",
    "SignalTests",
    "DownloadMessageTests.test_a_file_not_of_the_announced_size_is_said_in_sizes_for_people",
    "ErrorMessageTests.test_a_full_disk_is_a_one_line_error",
    "ResultOutputTests.test_a_long_cell_is_measured_once_per_character",
    "ErrorMessageTests.test_a_proxy_in_the_way_is_named",
    "ResultOutputTests.test_a_result_that_is_not_a_table_is_json_and_a_cut_one_is_said",
    "ResumeCommandTests.test_a_resumed_transfer_says_so",
    "ResultOutputTests.test_a_wide_table_fits_the_terminal",
    "ResultOutputTests.test_datasets_query_export",
    "DownloadCommandTests.test_download_destinations",
    "DownloadCommandTests.test_download_to_stdout",
    "ErrorMessageTests.test_errors_speak_in_the_command_lines_own_terms",
    "ErrorMessageTests.test_exit_statuses_and_streams_of_the_process",
    "DownloadCommandTests.test_export_and_download_in_one_command",
    "OptionTests.test_help_for_every_command",
    "ProgressLineTests.test_no_progress_line_over_a_file_written_to_the_terminal",
    "ResultOutputTests.test_output_formats",
    "OptionTests.test_retries_timeout_and_verbosity",
    "ProgressLineTests.test_the_progress_line_fits_the_terminal_and_redraws_in_place",
    "OptionTests.test_usage_errors_send_nothing",
    "ErrorMessageTests.test_a_certificate_failure_names_ca_bundle_which_works_from_the_option_and_the_profile",
    "OptionTests.test_a_command_is_one_entry_of_the_table_its_help_arguments_run_and_completion",
    "ResumeCommandTests.test_a_download_without_c_continues_what_a_c_run_left_and_leaves_nothing",
    "DownloadCommandTests.test_a_name_from_the_url_never_replaces_a_file",
    "ProgressLineTests.test_a_status_line_cut_to_the_terminal_shows_no_part_of_a_secret",
    "ResultOutputTests.test_a_table_narrows_its_text_first_then_shows_records_never_cutting_a_number",
    "DownloadCommandTests.test_an_absolute_url_needs_no_service_and_gets_no_key",
    "ResumeCommandTests.test_an_empty_file_a_c_run_left_is_continued_and_removed_too",
    "ResumeCommandTests.test_an_interrupted_export_download_with_c_continues_when_run_again",
    "DownloadCommandTests.test_connections_into_stdout_and_a_fifo_fetch_parts_at_once",
    "ErrorMessageTests.test_errors_say_what_to_do",
    "DownloadCommandTests.test_export_download_to_stdout_shows_the_export_as_a_block_on_a_terminal",
    "DownloadCommandTests.test_export_download_to_stdout_writes_the_file_alone",
    "OptionTests.test_help_per_command",
    "OptionTests.test_limit_rate_is_the_librarys_max_rate",
    "EscapingTests.test_no_control_character_from_the_server_reaches_the_terminal",
    "ProfileTests",
    "ClosedOutputTests.test_stdout_whose_reader_left_ends_quietly_and_a_failed_write_names_stdout",
    "ErrorMessageTests.test_the_certificate_advice_follows_the_errors_certificate_field_not_its_words",
    "ProgressLineTests.test_the_progress_line_keeps_its_shape_and_v_lines_are_whole",
    "StandInProcessTests",
    "CompletionTests",
]

SITECUSTOMIZE = """\
import os, random, signal, sys  # random registers its at-fork hook on import: before the name goes

for name in ("pwrite", "pread", "register_at_fork"):
    if hasattr(os, name):
        delattr(os, name)
if hasattr(signal, "SIGHUP"):
    del signal.SIGHUP
sys.modules["fcntl"] = None  # `import fcntl` raises ImportError, as on Windows
"""

PROBE = """\
import os, signal, sys
names = [("os.pwrite", os, "pwrite"), ("os.pread", os, "pread"), ("os.register_at_fork", os, "register_at_fork"),
         ("SIGHUP", signal, "SIGHUP")]
missing = [shown for shown, module, name in names if not hasattr(module, name)]
try:
    import fcntl
except ImportError:
    missing.append("fcntl")
sys.exit(0 if len(missing) == 5 else "the stand-in is not in place: only " + ", ".join(missing) + " missing")
"""


def main(names: list[str]) -> int:
    root = Path(__file__).resolve().parent.parent
    with tempfile.TemporaryDirectory(prefix="without-posix-extras-") as directory:
        Path(directory, "sitecustomize.py").write_text(SITECUSTOMIZE, encoding="utf-8")
        paths = [directory, *filter(None, [os.environ.get("PYTHONPATH")])]
        environment = {**os.environ, "PYTHONPATH": os.pathsep.join(paths)}
        subprocess.run([sys.executable, "-c", PROBE], env=environment, check=True)
        print(
            "== without os.pwrite, os.pread, fcntl, os.register_at_fork, signal.SIGHUP (a stand-in for Windows):",
            flush=True,
        )
        command = [
            sys.executable,
            str(root / ".ci" / "unittest_summary.py"),
            *(names or TESTS),
        ]
        return subprocess.run(command, env=environment, cwd=root).returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
