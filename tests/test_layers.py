"""The package's layers (edgeosc/__init__.py): no import loops, no import from a lower layer to a higher one."""
import ast
from pathlib import Path

PKG = Path(__file__).resolve().parents[1] / "edgeosc"
LAYERS = [("config", "io", "cbuild"), ("frontend", "integer", "runtime"), ("features", "data"),
          ("models", "dynamics"), ("quant",), ("checkpoint",), ("evaluate", "robustness"), ("train", "mining"),
          ("export",),
          ("bench", "report"), ("stages", "sweep", "stream", "stream_eval", "stream_soak", "deploy", "pi_check"),
          ("pipeline", "cli", "__main__")]
RANK = {name: i for i, names in enumerate(LAYERS) for name in names}


def imports() -> dict[str, set[str]]:
    """Top-level unit (edgeosc/<unit>.py or edgeosc/<unit>/) -> the units it imports, deferred imports included."""
    out = {}
    for path in PKG.rglob("*.py"):
        parts = path.relative_to(PKG).with_suffix("").parts
        package = parts[:-1]  # the folders holding this file, below edgeosc/
        seen = out.setdefault(parts[0], set())
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.level:
                base = list(package[:len(package) - node.level + 1])
                target = base + (node.module.split(".") if node.module else [node.names[0].name])
            elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("edgeosc."):
                target = node.module.split(".")[1:]
            elif isinstance(node, ast.Import):
                target = next((a.name.split(".")[1:] for a in node.names if a.name.startswith("edgeosc.")), [])
            else:
                continue
            if target and target[0] != parts[0]:
                seen.add(target[0])
    return out


def test_every_unit_has_a_layer():
    assert set(imports()) <= set(RANK) | {"__init__"}, set(imports()) - set(RANK)


def test_no_import_goes_up_a_layer():
    upward = sorted(f"{unit} -> {dep}" for unit, deps in imports().items() for dep in deps
                    if unit in RANK and RANK[dep] > RANK[unit])
    assert not upward
