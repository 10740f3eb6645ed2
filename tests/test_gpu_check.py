import importlib.metadata
import json
import subprocess
import sys
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from gum_utils.study import gpu_check

ROOT = Path(__file__).resolve().parent.parent
STOCK = ("torch", "transformers", "numpy")  # a GPU machine's stock image


def _requirements(name: str) -> list[str]:
    requires = importlib.metadata.distribution(name).requires or []
    return [req.name for req in map(Requirement, requires) if req.marker is None or req.marker.evaluate({"extra": ""})]


def stock_site_packages(where: Path) -> Path:
    """A directory holding only the stock packages and what they require, linked from this venv."""
    todo, seen = list(STOCK), set()
    while todo:
        name = canonicalize_name(todo.pop())
        if name not in seen:
            seen.add(name)
            todo += _requirements(name)
    where.mkdir()
    for name in seen:
        distribution = importlib.metadata.distribution(name)
        tops = {Path(str(f)).parts[0] for f in distribution.files or [] if not str(f).startswith("..")}
        for top in tops:
            source = Path(distribution.locate_file(top))
            if source.exists() and not (where / top).exists():
                (where / top).symlink_to(source)
    return where


def test_the_check_runs_with_only_torch_transformers_and_numpy_and_leaves_gpu_fields_empty(tmp_path):
    site = stock_site_packages(tmp_path / "site")
    env = {"PYTHONPATH": f"{site}:{ROOT}", "PATH": "/usr/bin:/bin", "HOME": str(tmp_path)}
    python = [sys.executable, "-S"]  # -S: no site-packages but the stock ones above
    absent = subprocess.run(python + ["-c", "import pandas"], env=env, capture_output=True, text=True)
    assert "No module named 'pandas'" in absent.stderr  # the test would notice an extra import
    out = tmp_path / "rows.json"
    done = subprocess.run(
        python + ["-m", "gum_utils.study.gpu_check", "--device", "cpu", "--size", "tiny", "--steps", "2",
                  "--archs", "vit", "nanovlm", "--optimizers", "sgd", "--strategies", "standard", "accumulation",
                  "--out", str(out)],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    rows = json.loads(out.read_text())
    assert [(r["arch"], r["strategy"], r["status"]) for r in rows] == [
        ("vit", "standard", "ok"), ("vit", "accumulation", "ok"),
        ("nanovlm", "standard", "ok"), ("nanovlm", "accumulation", "ok")]
    assert all(r["mean_step_time_s"] > 0 and r["mean_gpu_util_percent"] is None and r["mfu"] is None for r in rows)
    header, rule, first = done.stdout.split("\n\n")[1].splitlines()[:3]
    assert header.split()[:5] == ["arch", "optimizer", "strategy", "status", "step"]
    assert first.split()[:4] == ["vit", "sgd", "standard", "ok"] and first.split()[10] == "-"  # util %


def test_the_table_formats_gpu_fields_and_explains_a_skipped_cell():
    config = gpu_check.RunConfig(arch="llama", size="paper", optimizer="adam")
    measured = gpu_check.row(config, {"mean_step_time_s": 0.4123, "peak_memory_bytes": 30 * gpu_check.GIB,
                                      "planned_peak_bytes": 27 * gpu_check.GIB, "device_data_bytes": gpu_check.GIB,
                                      "mfu": 0.4561, "model_tflops_per_s": 30.5, "samples_per_s": 19.4},
                             {"mean_gpu_util_percent": 97.2, "mean_gpu_power_w": 650.0, "energy_j": 2600.0}, "ok")
    skipped = gpu_check.row(config, {}, {}, "skipped", "needs about 30.0 GiB, 20.0 GiB free on cpu")
    table = gpu_check.format_table([measured, skipped])
    cells = table.splitlines()[2].split()
    assert cells[4:] == ["412", "30.0", "-", "27.0", "1.0", "-6.7", "97", "650", "2600", "30.50", "45.6", "19.4"]
    assert table.splitlines()[3].split()[3:] == ["skipped"] + ["-"] * 12
    assert "llama/adam/standard: needs about 30.0 GiB, 20.0 GiB free on cpu" in table


def test_on_a_cpu_the_plan_is_judged_against_the_real_steps_tensors_not_the_process_rss():
    """paper-smoke's ViT: RSS 1.9 GiB (torch's libraries, the allocator's cache) read as a -65 % plan error."""
    config = gpu_check.RunConfig(arch="vit", size="paper", optimizer="sgd", device="cpu")
    summary = {"peak_memory_bytes": 2000, "cpu_tensor_peak_bytes": 800, "planned_peak_bytes": 780}
    assert gpu_check.row(config, summary, {}, "ok")["plan_error_percent"] == pytest.approx(-2.5)


def test_a_cell_that_does_not_fit_is_skipped_with_the_memory_it_needs(monkeypatch):
    monkeypatch.setattr(gpu_check, "free_bytes", lambda device: 1 * gpu_check.GIB)
    args = gpu_check.parse_args(["--device", "cpu", "--archs", "llama", "--optimizers", "adam",
                                 "--strategies", "standard"])
    rows = gpu_check.run_check(gpu_check.check_configs(args), echo=lambda *a, **k: None)
    assert rows[0]["status"] == "skipped"
    # Llama-3.2-1B in float32 with Adam: 1.24e9 x 16 bytes plus the margin, about 20.4 GiB.
    assert rows[0]["note"].startswith("needs about 20.4 GiB, 1.0 GiB free")


def test_asking_for_a_gpu_where_there_is_none_is_a_clear_error(capsys):
    if gpu_check.torch.cuda.is_available():
        pytest.skip("a GPU is present")
    with pytest.raises(SystemExit):
        gpu_check.parse_args(["--device", "cuda"])
    assert "torch sees no GPU" in capsys.readouterr().err
