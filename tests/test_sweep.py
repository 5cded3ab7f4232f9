import csv
import json
import re
import shutil
from pathlib import Path

import pytest

from click.testing import CliRunner

from edgeosc import sweep
from edgeosc.cli import main

SPEC = """
[base.data]
n_voices = 4
renditions = 1
[base.train]
epochs = 1
batch_size = 16
[grid]
"model.attention" = ["oscillator", "softmax"]
"model.d_osc" = [2, 4]
"""


def test_expand_deduplicates_settings_softmax_ignores():
    base, grid = sweep.load_sweep_text(SPEC)
    names = [name for name, _ in sweep.expand(base, grid)]
    assert names == ["attention=oscillator-d_osc=2", "attention=oscillator-d_osc=4", "attention=softmax"]


SWEEPS = Path(__file__).parents[1] / "sweeps"


@pytest.mark.parametrize("path", sorted(SWEEPS.glob("*/*.toml")), ids=lambda p: f"{p.parent.name}/{p.name}")
def test_every_shipped_sweep_file_is_a_valid_grid(path):
    """docs/results.md and docs/notebook.md cite these files as the commands behind their tables: they must run."""
    runs = sweep.expand(*sweep.load_sweep(path))
    assert runs and all(set(cfgs) == set(sweep.SECTIONS) for _, cfgs in runs)


def test_the_sweeps_readme_maps_every_file():
    """sweeps/README.md names each file once, in its folder's table; every file it names is there."""
    text = (SWEEPS / "README.md").read_text()
    files = sorted(p.relative_to(SWEEPS).as_posix() for p in SWEEPS.glob("*/*.toml"))
    assert len(files) >= 50 and not list(SWEEPS.glob("*.toml"))  # in folders, none left at the top
    for f in files:
        folder, name = f.split("/")
        section = text.split(f"## {folder}/", 1)[1].split("\n## ", 1)[0]
        assert f"`{name}`" in section, f
    named = re.findall(r"`([\w.-]+\.toml)`", text)
    assert sorted(named) == sorted(f.split("/")[1] for f in files)


@pytest.mark.parametrize("text,needle", [
    ('[grid]\n"model.colour" = [1]', "model.colour"),
    ('[grid]\n"optim.lr" = [1]', "optim.lr"),
    ('[grid]\n"model.p" = []', "non-empty"),
    ("[grid\n", "cannot read"),
])
def test_bad_sweep_files(text, needle):
    with pytest.raises(ValueError, match=needle):
        sweep.load_sweep_text(text)


def test_run_sweep_writes_table_and_plot_and_skips_finished_runs(tmp_path):
    spec = tmp_path / "s.toml"
    spec.write_text(SPEC)
    rows = sweep.run_sweep(spec, tmp_path / "out", cache_dir=tmp_path / "cache", progress=False, echo=lambda *_: None)
    assert len(rows) == 3 and all(0 <= r["test_accuracy"] <= 1 for r in rows)
    with open(tmp_path / "out" / "results.csv") as f:
        table = list(csv.DictReader(f))
    assert [r["run"] for r in table] == [r["run"] for r in rows]
    assert (tmp_path / "out" / "accuracy.png").stat().st_size > 1000
    assert (tmp_path / "out" / "training.png").stat().st_size > 1000
    history = json.loads((tmp_path / "out" / rows[0]["run"] / "metrics.json").read_text())
    assert rows[0]["max_grad_norm"] == max(e["max_grad_norm"] for e in history) > 0
    assert rows[0]["final_train_loss"] == history[-1]["train_loss"]
    table = CliRunner().invoke(main, ["report", "seeds", str(tmp_path / "out")])
    assert table.exit_code == 0 and table.output.count("synth") == 3, table.output
    # the same grid again with every run 10 points better: paired by run name, A - B is -10 with no spread
    shutil.copytree(tmp_path / "out", tmp_path / "better")
    for r in rows:
        res = tmp_path / "better" / r["run"] / "results.json"
        res.write_text(json.dumps(dict(json.loads(res.read_text()), test_accuracy=r["test_accuracy"] + 0.1)))
    paired = CliRunner().invoke(main, ["report", "paired", str(tmp_path / "out"), str(tmp_path / "better"), "--json"])
    assert paired.exit_code == 0, paired.output
    (row,) = json.loads(paired.output)
    assert row["quant"] == "float" and row["n"] == 3 and row["diff"] == pytest.approx(-10) and row["se"] < 1e-9
    alone = CliRunner().invoke(main, ["report", "paired", str(tmp_path / "out"), str(tmp_path / "cache")])
    assert alone.exit_code != 0 and "no finished runs of the same name" in alone.output
    said = []
    again = sweep.run_sweep(spec, tmp_path / "out", cache_dir=tmp_path / "cache", progress=False, echo=said.append)
    assert again == rows and not any(s.startswith("[") for s in said)  # nothing retrained


def test_sweep_on_a_local_ray_instance(tmp_path):
    pytest.importorskip("ray", reason="ray is in the test extra; absent means a hand-made environment")
    spec = tmp_path / "s.toml"
    spec.write_text(SPEC.replace('"model.d_osc" = [2, 4]', '"model.d_osc" = [2]'))
    rows = sweep.run_sweep(spec, tmp_path / "out", cache_dir=tmp_path / "cache", progress=False,
                           echo=lambda *_: None, ray_address="local")
    assert [r["run"] for r in rows] == ["attention=oscillator-d_osc=2", "attention=softmax"]
    assert all((tmp_path / "out" / r["run"] / "best.pt").is_file() for r in rows)
    assert any((tmp_path / "out" / "ray").iterdir())
