"""constraints.txt pins every package pyproject.toml names (the runtime's, and the build, test and
bench extras'), within pyproject's own bounds: the README's commands and CI install with it, so a
dependency added without a pin would float again."""

import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _name(requirement: str) -> str:
    return re.split(r"[\s\[<>=!~;]", requirement, maxsplit=1)[0].lower().replace("_", "-")


def _pins() -> dict[str, str]:
    pins = {}
    for line in (ROOT / "constraints.txt").read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            name, sep, version = line.partition("==")
            assert sep, f"constraints.txt: {line!r} is not NAME==VERSION"
            pins[_name(name)] = version
    return pins


def _requirements() -> list[str]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    reqs = list(project["dependencies"])
    for extra in ("build", "test", "bench"):
        reqs += [r for r in project["optional-dependencies"][extra] if not r.startswith("kb-search")]
    return reqs


def _release(version: str) -> tuple[int, ...]:
    return tuple(int(p) for p in re.findall(r"\d+", version)[:3])


def test_every_dependency_is_pinned_within_its_bounds():
    pins = _pins()
    for req in _requirements():
        name = _name(req)
        assert name in pins, f"constraints.txt has no pin for {name} (pyproject.toml: {req!r})"
        for op, bound in re.findall(r"(>=|==)\s*([\w.]+)", req):
            pinned, wanted = _release(pins[name]), _release(bound)
            assert pinned >= wanted if op == ">=" else pinned == wanted, f"constraints.txt pins {name}=={pins[name]}, pyproject.toml wants {req!r}"


def test_readme_and_ci_install_with_the_constraints():
    readme = (ROOT / "README.md").read_text()
    ci = (ROOT / ".ci" / "run").read_text()
    assert "pip install -e '.[test]' -c constraints.txt && python -m pytest" in readme
    assert "pip install -e '.[build]' -c constraints.txt && kb-build" in readme
    assert "-e '.[test]' -c constraints.txt" in ci
