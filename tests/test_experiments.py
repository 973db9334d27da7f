"""experiments/run.py: where results and figures go, and what --smoke runs (no training here:
the runs themselves are the docs test's, `python experiments/run.py e2 --smoke` and the like)."""

import json
import pathlib
import sys

import pytest

from experiments import run as runner
from roformer_jax import models

ROOT = pathlib.Path(__file__).resolve().parents[1]


def test_results_go_to_the_run_directory_and_only_publish_updates_the_committed_files(tmp_path, monkeypatch):
  canned = json.loads((ROOT / "experiments" / "results" / "e3.json").read_text())
  calls = []

  def fake_run(name, seeds, steps, smoke=False, only=None):
    calls.append((name, seeds, steps, smoke) + ((only,) if only else ()))
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

  main("e3", "--arms", "linear,linear + RoPE")  # --arms reaches run() as a list of names
  assert calls[-1] == ("e3", [0, 1], None, False, ["linear", "linear + RoPE"])

  main("e3", "--publish")
  assert json.loads((tmp_path / "experiments" / "results" / "e3.json").read_text())["arms"] == canned["arms"]
  assert (tmp_path / "docs" / "figures" / "e3.png").is_file()


def test_arms_refuses_an_unknown_arm_before_anything_trains():
  with pytest.raises(SystemExit, match="no arm"):
    runner.run("e7", [0], 2, only=["rope-mixed", "rope-3d"])  # refused before anything trains


def test_smoke_arms_are_the_smoke_variants_of_their_configs():
  for name, exp in runner.EXPERIMENTS.items():
    for arm in exp["arms"].values():
      config = runner.make_config(exp, arm, 0, None, smoke=True)
      assert config.total_steps == 2 and config.model.d_model == 32, name
      assert config.eval.max_batches == 2 and len(config.eval.length_factors) <= 2
      plain = lambda x: x.to_dict() if hasattr(x, "to_dict") else x  # dict values come back as ConfigDicts
      # "model.position", "vit.position"
      section = lambda key, config=config: config[key.split(".")[0]][key.split(".")[1]]
      assert all(plain(section(k)) == v for k, v in arm.items()), (name, arm)
      models.ModelConfig.from_dict(config.model.to_dict())  # every arm's model builds its config (e8's layers)


def test_e6_merges_results_per_seed_and_per_target():
  import copy

  import pytest

  from experiments import context_extension
  recorded = json.loads((ROOT / "experiments" / "results" / "e6.json").read_text())  # seeds 0, 1
  at4, at8 = copy.deepcopy(recorded), copy.deepcopy(recorded)  # as the 4L and 8L invocations wrote them
  at4["arms"] = {arm: {"4": by["4"]} for arm, by in recorded["arms"].items()}
  at8["arms"] = {arm: {"8": by["8"]} for arm, by in recorded["arms"].items()}
  at4["settings"]["targets"], at4["commands"] = [4], ["python experiments/run.py e6 --targets 4"]
  at8["settings"]["targets"], at8["commands"] = [8], ["python experiments/run.py e6 --targets 8"]
  merged = context_extension.merge([at4, at8])
  assert merged["seeds"] == [0, 1] and len(merged["base"]) == 2  # one base run per seed
  assert merged["settings"]["targets"] == [4, 8] and all(sorted(by) == ["4", "8"] for by in merged["arms"].values())
  assert merged["commands"] == ["python experiments/run.py e6 --targets 4", "python experiments/run.py e6 --targets 8"]
  assert merged["arms"] == recorded["arms"]
  with pytest.raises(ValueError, match=r"seed 0 at targets \['4'\] appears in two results"):
    context_extension.merge([at4, at4])
  at8["base"][1]["length_curve"][0]["loss"] += 0.1
  with pytest.raises(ValueError, match="seed 1: two results evaluated different base runs"):
    context_extension.merge([at4, at8])


def test_e7_fine_tunes_an_arm_at_48_px_from_its_32_px_run_of_the_same_seed(tmp_path, monkeypatch):
  # Issue 37 item 8: "rope-mixed, fine-tuned at 48 px" is its own row, trained after the arm from the arm's run.
  trained, evaluated = [], []

  def fake_train(config, workdir):
    trained.append((workdir, config))
    pathlib.Path(workdir).mkdir(parents=True, exist_ok=True)
    (pathlib.Path(workdir) / "metrics.jsonl").write_text('{"step": 1, "loss": 1.0}\n')

  def fake_evaluate(config, workdir):
    evaluated.append((workdir, config.data.image_size))
    return {"metrics": {"loss": 1.0, "accuracy": 0.5}}

  monkeypatch.setattr(runner, "ROOT", str(tmp_path))
  monkeypatch.setattr(runner.trainer, "train_and_evaluate", fake_train)
  monkeypatch.setattr(runner.evaluate, "evaluate", fake_evaluate)
  out = runner.run("e7", [3], 600, only=["rope-mixed", "none"])
  runs = tmp_path / "experiments" / "runs" / "e7"
  assert list(out["arms"]) == ["rope-mixed", "none", "rope-mixed, fine-tuned at 48 px"]
  assert [w for w, _ in trained] == [str(runs / "rope-mixed_s3"), str(runs / "none_s3"), str(runs / "rope-mixed-ft48_s3")]
  base, tuned = trained[0][1], trained[2][1]
  assert base.total_steps == 600 and base.data.image_size == base.vit.image_size == 32 and not base.init_from
  assert tuned.init_from == str(runs / "rope-mixed_s3") and tuned.data.image_size == tuned.vit.image_size == 48
  assert (tuned.total_steps, tuned.optim.warmup_steps, tuned.optim.learning_rate) == (100, 10, 2e-4)  # not --steps
  assert tuned.vit.position == "rope_mixed" and tuned.seed == 3
  assert [r for w, r in evaluated if w.endswith("ft48_s3")] == [48, 32, 48, 64]  # its own eval, then 32/48/64 px
  assert sorted(out["arms"]["rope-mixed, fine-tuned at 48 px"][0]["resolutions"]) == ["32", "48", "64"]
  smoke = runner.fine_tune_config(runner.EXPERIMENTS["e7"], base, "src", smoke=True)  # the smoke keeps its steps
  assert (smoke.total_steps, smoke.data.image_size, smoke.init_from) == (base.total_steps, 48, "src")
