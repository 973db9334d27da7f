"""experiments/run.py: where results and figures go, and what --smoke runs (no training here:
the runs themselves are the docs test's, `python experiments/run.py e2 --smoke` and the like)."""

import json
import pathlib
import sys

from experiments import run as runner

ROOT = pathlib.Path(__file__).resolve().parents[1]


def test_results_go_to_the_run_directory_and_only_publish_updates_the_committed_files(tmp_path, monkeypatch):
  canned = json.loads((ROOT / "experiments" / "results" / "e3.json").read_text())
  calls = []

  def fake_run(name, seeds, steps, smoke=False):
    calls.append((name, seeds, steps, smoke))
    return dict(canned)

  monkeypatch.setattr(runner, "ROOT", str(tmp_path))
  monkeypatch.setattr(runner, "run", fake_run)

  def main(*argv):
    monkeypatch.setattr(sys, "argv", ["experiments/run.py", *argv])
    runner.main()

  main("e3")  # used to overwrite experiments/results/e3.json and docs/figures/e3.png
  assert {p.name for p in (tmp_path / "experiments" / "runs" / "e3").iterdir()} == {"e3.json", "e3.png"}
  assert not (tmp_path / "experiments" / "results").exists() and not (tmp_path / "docs").exists()

  main("e3", "--seeds", "3,4", "--smoke", "--publish")  # --smoke never publishes
  assert calls[-1] == ("e3", [3], None, True)
  assert (tmp_path / "experiments" / "runs" / "smoke" / "e3" / "e3.json").is_file()
  assert not (tmp_path / "experiments" / "results").exists() and not (tmp_path / "docs").exists()

  main("e3", "--publish")
  assert json.loads((tmp_path / "experiments" / "results" / "e3.json").read_text())["arms"] == canned["arms"]
  assert (tmp_path / "docs" / "figures" / "e3.png").is_file()


def test_smoke_arms_are_the_smoke_variants_of_their_configs():
  for name, exp in runner.EXPERIMENTS.items():
    for arm in exp["arms"].values():
      config = runner.make_config(exp, arm, 0, None, smoke=True)
      assert config.total_steps == 2 and config.model.d_model == 32, name
      assert config.eval.max_batches == 2 and len(config.eval.length_factors) <= 2
      assert all(config.model[k.split(".")[1]] == v for k, v in arm.items())
