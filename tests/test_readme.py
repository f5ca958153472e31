"""The docs' generated parts match the code that generates them, and the README's commands match CI."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()


def _block(page: str, name: str) -> str:
    text = (ROOT / "docs" / page).read_text()
    block = re.search(r"<!-- BEGIN %s \(generated\) -->\n(.*?)<!-- END %s -->" % (re.escape(name), re.escape(name)),
                      text, re.S)
    assert block, f"docs/{page} lost its '{name}' markers"
    return block.group(1).strip()


def test_reward_catalogue_is_generated_from_the_registry():
    import unsloth_grpo.tasks  # noqa: F401 - the tasks' rewards are listed through the task registry
    from unsloth_grpo.rewards import catalogue_markdown

    assert _block("rewards.md", "reward catalogue") == catalogue_markdown().strip(), \
        "regenerate with: python tools/update_readme.py"


def test_memory_table_is_the_planners_output():
    from unsloth_grpo.hardware.planner import preset_table_markdown

    assert _block("planner.md", "memory table") == preset_table_markdown().strip(), \
        "regenerate with: python tools/update_readme.py"


def test_ci_runs_the_readme_test_command():
    ci = (ROOT / ".ci" / "run").read_text()
    assert 'pip install -q -c ci/constraints.txt -e ".[test]"' in ci and "python -m pytest -q -n 2 " in ci
    assert 'pip install -c ci/constraints.txt -e ".[test]" && python -m pytest -q -n 2 tests' in README
    assert "python -m unsloth_grpo.recipes.gsm8k --preset smoke --output-dir outputs/smoke" in README


def test_ci_runs_the_vllm_tests_in_the_second_environment():
    """vLLM's tests are skipped in the main environment; CI builds .venv-vllm and runs them there, and a
    failure of either environment fails the run."""
    ci = (ROOT / ".ci" / "run").read_text()
    build = ci.index("bash ci/vllm-cpu-env.sh")
    run = ci.index(".venv-vllm/bin/python -m pytest -q -p no:cacheprovider -m vllm tests")
    assert ci.index("python -m pytest -q -n 2 ") < build < run
    assert 'exit "$vstatus"' in ci and 'exit "$status"' in ci


def test_readme_stays_short():
    assert len(README.splitlines()) <= 200, "the README is the front page: move detail to a docs/ page"


def test_the_install_reads_pyproject_without_deprecation_warnings():
    """The README's install builds the package from pyproject.toml; setuptools warned there (a `license`
    table instead of an SPDX string) in a boxed message that buried the install's own output."""
    import warnings

    from setuptools.config.pyprojecttoml import apply_configuration
    from setuptools.dist import Distribution
    from setuptools.warnings import SetuptoolsWarning

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        dist = apply_configuration(Distribution(), ROOT / "pyproject.toml")
    assert [str(w.message).splitlines()[0] for w in caught if issubclass(w.category, SetuptoolsWarning)] == []
    assert dist.metadata.license_expression == "Apache-2.0"


def test_readme_quotes_the_fault_suites_table_as_the_reliability_page_records_it():
    line = re.compile(r"^ *(fault injection \(seed \d+\): .*)$", re.M)
    page = (ROOT / "docs" / "reliability.md").read_text()
    quoted, recorded = line.findall(README), line.findall(page)
    assert quoted and quoted == recorded
    faults_on_page = [row.split("|")[1].strip() for row in page.splitlines()
                      if row.startswith("| ") and "| yes |" in row]
    tried = int(re.search(r"(\d+) faults tried", recorded[0]).group(1))
    assert len(faults_on_page) == tried, "the page's table and its summary line disagree"


def test_the_readme_installs_from_a_clone_and_says_nothing_ran_on_a_consumer_gpu():
    """The package is on no package index, so ``pip install "unsloth-grpo[...]"`` cannot work; and the
    headline's consumer GPU is one nothing has run on yet (issue 33)."""
    import tomllib

    repository = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["urls"]["Repository"]
    assert 'pip install "unsloth-grpo[' not in README
    assert f"git clone {repository} && cd {repository.rsplit('/', 1)[1]}" in README
    assert 'pip install -e ".[unsloth,vllm]"' in README
    assert "nothing has been run on a consumer GPU yet" in README
    assert "docs/gpu.md#what-was-verified-on-a-real-gpu-and-what-was-not" in README


def test_exports_and_outputs_are_git_ignored():
    ignored = (ROOT / ".gitignore").read_text().splitlines()
    assert "outputs/" in ignored and "exports/" in ignored  # what runs and `export` write
