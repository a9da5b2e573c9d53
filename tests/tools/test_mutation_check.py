"""tools/mutation_check.py, the maintainer's mutation check of the statistical tests (docs/correctness.md):
its mutants keep applying to the code as it changes."""

import runpy

from rs_testing import REPO


def test_every_mutant_of_the_mutation_check_still_applies():
    """tools/mutation_check.py stops at the first mutant whose original text is gone from the code, so a
    refactor silently leaves the statistical tests unchecked until someone runs it (the Wald-bound mutant
    had stopped applying when clopper_pearson_upper was added). Each mutant's text must occur exactly once,
    and the tests it names must exist."""
    check = runpy.run_path(str(REPO / "tools" / "mutation_check.py"))
    assert len(check["MUTANTS"]) >= 29
    for name, path, old, new, tests in check["MUTANTS"]:
        assert (REPO / path).read_text().count(old) == 1, name
        assert old != new, name
        for test in tests.split(" -k ")[0].split():
            assert (REPO / test.split("::")[0]).is_file(), (name, test)
