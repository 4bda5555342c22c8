"""The README: a guide, short, whose API part cannot go stale."""

from __future__ import annotations

import inspect
import re
import unittest

import dataset_client as dc
from dataset_client import DatasetClient
from tests.support import ROOT

# unittest's hook: this module's tests join the one set of workers a run shares
from tests.support import load_tests as load_tests


class ReadmeTests(unittest.TestCase):
    """The README stays a guide (short, the quick start near the top) and its API part cannot go stale."""

    def test_help_at_a_prompt_fits_80_columns_but_for_signatures(self) -> None:
        # Found by a new user: help(DatasetClient) broke words at 80 columns (docstrings at 100).
        shown = [("module", dc, 76)]
        for name in dc.__all__:
            public = getattr(dc, name)
            if isinstance(public, type):
                shown.append((name, public, 76))
                methods = [m for m in vars(public) if not m.startswith("_")]
                methods = [m for m in methods if inspect.isroutine(getattr(public, m))]
                shown += [(f"{name}.{m}", getattr(public, m), 72) for m in methods]
        for name, public, width in shown:  # help() indents a class's by 4, a method's by 8
            with self.subTest(name=name):
                lines = (inspect.getdoc(public) or "").splitlines()
                self.assertEqual([line for line in lines if len(line) > width], [])

    README = ROOT / "README.md"

    API_HEADING = "## The Python API"

    def api_part(self, text: str) -> tuple[str, str]:
        """The README's API part: its code blocks, and its prose (the rest), apart."""
        self.assertIn(f"\n{self.API_HEADING}\n", text)
        start = text.index(self.API_HEADING)
        end = text.find("\n## ", start + 1)
        part = text[start : end if end >= 0 else len(text)]
        pieces = part.split("```")
        return "\n".join(pieces[1::2]), "\n".join(pieces[0::2])

    def public_parameters(self) -> dict[str, list[str]]:
        """The public parameter names of the constructor and of every public method, by method."""
        import inspect

        methods = {"DatasetClient": DatasetClient.__init__}
        for name, member in inspect.getmembers(
            DatasetClient, inspect.isroutine
        ):  # from_profile too
            if not name.startswith("_"):
                methods[name] = member
        listed = {name: inspect.signature(method).parameters for name, method in methods.items()}
        return {name: [p for p in names if p != "self"] for name, names in listed.items()}

    def missing_from(self, text: str) -> list[str]:
        """Each public parameter (as method.name) not both in the API part's signatures and described in its prose."""
        code, prose = self.api_part(text)
        missing = []
        for method, names in self.public_parameters().items():
            if not re.search(rf"\b{method}\(", code):
                missing.append(f"{method}()")
            for name in names:
                if not re.search(rf"\b{name}\b", code) or f"`{name}`" not in prose:
                    missing.append(f"{method}.{name}")
        return missing

    def test_every_public_parameter_is_in_the_readmes_api_part(self) -> None:
        text = self.README.read_text(encoding="utf-8")
        parameters = self.public_parameters()
        self.assertIn("max_rate", parameters["download"], "the check sees the real signatures")
        self.assertIn("idempotency_key", parameters["create_export"])
        self.assertEqual(parameters["from_profile"], ["profile", "settings"])
        private = [
            f"{method}.{name}"
            for method, names in parameters.items()
            for name in names
            if name[0] == "_"
        ]
        self.assertEqual(private, [], "no public signature has a private parameter")
        self.assertEqual(self.missing_from(text), [])
        # The check fails when a parameter goes: removed from the signatures, or from the prose.
        self.assertIn(
            "download.max_rate", self.missing_from(re.sub(r"\bmax_rate=None, ", "", text))
        )
        self.assertIn(
            "create_export.idempotency_key",
            self.missing_from(text.replace("- `idempotency_key`:", "-")),
        )
        self.assertIn(
            "DatasetClient.base_url", self.missing_from(text.replace("`base_url`", "base_url"))
        )

    def test_the_readme_is_short_with_the_quick_start_near_the_top(self) -> None:
        text = self.README.read_text(encoding="utf-8")
        self.assertLess(len(text), 15_000)
        lines = text.splitlines()
        quick_start = next(
            i for i, line in enumerate(lines) if line.startswith("## ") and "Quick start" in line
        )
        self.assertLess(quick_start, 100)
        self.assertEqual(lines[quick_start + 2], "```python")
        for command in ("python3 examples/local_service.py --demo", "python3 -m unittest -v"):
            self.assertIn(f"\n{command} ", text, "the two set-up commands, as typed")
        # -I: the directory's other files (a planted json.py) are never imported.
        self.assertIn("""\nalias dataset-client="python3 -I '$PWD/dataset_client.py'"\n""", text)
        self.assertTrue((ROOT / "docs" / "DESIGN.md").is_file())
        self.assertIn("(docs/DESIGN.md)", text)

    def test_the_readme_and_the_library_say_what_the_program_does(self) -> None:
        # Found by a new user (issue 38): "about 10 s" took 22-42 s on a loaded two-core machine;
        # the fan-out line alone said python; "before anything is sent" was broader than the truth.
        text = self.README.read_text(encoding="utf-8")
        self.assertRegex(
            text, r"\npython3 -m unittest -v +# the tests \(\d+-\d+ s on two busy cores"
        )
        self.assertEqual(re.findall(r"(?m)^ *python .*", text), [], "python3, as everywhere else")
        for said in (text, dc.__doc__ or ""):
            with self.subTest(said=said[:20]):
                sentence = re.search(r"Bad arguments raise .*?\.(\n|$)", said, re.DOTALL)
                assert sentence is not None
                self.assertIn("``format``" if said != text else "`format`", sentence[0])
                self.assertIn('"A,B"', sentence[0], "a comma-joined symbols string is one symbol")
