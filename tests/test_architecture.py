"""The layering and naming rules of ARCHITECTURE.md, read from the source (no JAX runs here).

* no module imports another module's private (``_``) names; across packages only public API or
  the internal layer ``jaxstop._src`` is used, and ``_src`` imports nothing public;
* every file of the package is named in ARCHITECTURE.md;
* each public module's ``__all__`` lists exactly the public names it defines or re-exports
  (``from x import name as name``);
* every deprecation warning goes through ``checks.deprecated`` with the phrase pytest errors on.
"""

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "jaxstop"


def _modules():
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(ROOT).with_suffix("").parts
        is_init = parts[-1] == "__init__"
        name = ".".join(parts[:-1] if is_init else parts)
        yield path, name, is_init


def _private(part: str) -> bool:
    return part.startswith("_") and not part.startswith("__")


def _unit(module: str) -> str:
    """The package a module belongs to for the rules: ``jaxstop.X`` (``jaxstop.integrations.Y``)."""
    parts = module.split(".")
    return ".".join(parts[:3] if parts[1:2] == ["integrations"] else parts[:2])


def _is_module(dotted: str) -> bool:
    path = ROOT / dotted.replace(".", "/")
    return path.with_suffix(".py").exists() or path.is_dir()


def _imports(path: Path, name: str, is_init: bool):
    """``(line, imported module, imported name or None)`` for every jaxstop import of a file."""
    here = name if is_init else name.rsplit(".", 1)[0]
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = here.split(".")[: len(here.split(".")) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if target.split(".")[0] == "jaxstop":
                for alias in node.names:
                    yield node.lineno, target, alias.name
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] == "jaxstop":
                    yield node.lineno, alias.name, None


def test_no_module_imports_private_names_across_the_rules():
    bad = []
    for path, name, is_init in _modules():
        for line, target, imported in _imports(path, name, is_init):
            where = f"{path.relative_to(ROOT)}:{line}"
            full = f"{target}.{imported}" if imported else target
            if imported and not _is_module(full) and _private(imported):
                bad.append(f"{where} imports the private name {full}")
                continue
            # a module path: private parts are fine inside one's own package or in _src
            module = full if _is_module(full) else target
            parts = module.split(".")
            if parts[:2] == ["jaxstop", "_src"]:
                parts = parts[2:]
            if any(_private(p) for p in parts) and _unit(module) != _unit(name):
                bad.append(f"{where} reaches into {module}, private to {_unit(module)}")
            if name.startswith("jaxstop._src") and not full.startswith("jaxstop._src"):
                bad.append(f"{where}: the internal layer imports the public {full}")
    assert not bad, "\n".join(bad)


def test_every_file_of_the_package_is_in_architecture_md():
    text = (ROOT / "ARCHITECTURE.md").read_text()
    missing = [str(path.relative_to(ROOT)) for path in sorted(PACKAGE.rglob("*.py"))
               if path.name != "__init__.py" and path.stem not in text]
    assert not missing, f"not described in ARCHITECTURE.md: {missing}"


def test_public_modules_all_lists_exactly_their_public_names():
    bad = []
    for path, name, _ in _modules():
        if any(_private(p) for p in name.split(".")) or path.name == "__main__.py":
            continue
        tree = ast.parse(path.read_text())
        names, listed = set(), None
        for node in tree.body:
            if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
                names.add(node.name)
            elif isinstance(node, (ast.Assign, ast.AnnAssign)):
                for target in node.targets if isinstance(node, ast.Assign) else [node.target]:
                    if isinstance(target, ast.Name) and target.id == "__all__":
                        listed = [ast.literal_eval(e) for e in node.value.elts]
                    elif isinstance(target, ast.Name):
                        names.add(target.id)
            elif isinstance(node, ast.ImportFrom):
                names.update(a.name for a in node.names if a.asname == a.name)
            elif isinstance(node, ast.Try):   # jaxstop.__version__
                names.update(t.id for n in ast.walk(node) if isinstance(n, ast.Assign)
                             for t in n.targets if isinstance(t, ast.Name))
        public = {n for n in names if not n.startswith("_") or n == "__version__"}
        if listed is None:
            bad.append(f"{name} has no __all__")
            continue
        if set(listed) != public:
            bad.append(f"{name}: __all__ lacks {sorted(public - set(listed))}, "
                       f"lists undefined {sorted(set(listed) - public)}")
    assert not bad, "\n".join(bad)


def _text(node) -> str:
    """The literal text of a str or f-string expression, ``{}`` for each placeholder."""
    if isinstance(node, ast.Constant):
        return str(node.value)
    if isinstance(node, ast.JoinedStr):
        return "".join(_text(v) if isinstance(v, ast.Constant) else "{}" for v in node.values)
    return ""


def test_deprecations_go_through_one_function_with_the_phrase_pytest_errors_on():
    """Only checks.deprecated raises DeprecationWarning, and every message passed to it says
    "is deprecated and will be removed in the next release", which pyproject's filterwarnings
    turns into an error: a test that uses a deprecated form outside ``pytest.warns`` fails."""
    phrase = "is deprecated and will be removed in the next release"
    assert f'"error:.*{phrase}:DeprecationWarning"' in (ROOT / "pyproject.toml").read_text()
    bad, calls = [], 0
    for path, name, _ in _modules():
        for node in ast.walk(ast.parse(path.read_text())):
            where = f"{path.relative_to(ROOT)}:{getattr(node, 'lineno', 0)}"
            if isinstance(node, ast.Name) and node.id == "DeprecationWarning" and name != "jaxstop._src.checks":
                bad.append(f"{where} raises DeprecationWarning itself (use checks.deprecated)")
            elif isinstance(node, ast.Call) and "deprecated" in (getattr(node.func, "attr", None),
                                                                 getattr(node.func, "id", None)):
                calls += 1
                if phrase not in _text(node.args[0]):
                    bad.append(f"{where}: the message does not say {phrase!r}")
    assert calls >= 4 and not bad, "\n".join(bad)
