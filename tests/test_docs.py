"""Docs as tests: every documented command line runs, and every Python snippet runs.

What is collected (a new command in any of these places is covered without touching this file):
- README.md and docs/*.md: each line of a ```bash block, and each inline code span that starts
  like a command (`python ...`, `.venv/bin/python ...`, `make ...`, `pytest ...`, `x.py --...`);
- the docstrings of train.py, eval.py, generate.py, configs/*.py and experiments/*.py: each line
  that starts like a command, and each inline code span that does.

How each is treated (docs/development.md, "How the docs are tested", says the same for users):
- `# needs: gpu|network|torch|cluster` at the end of the line: skipped, with that reason.
- A synopsis, with a `<placeholder>`, an optional `[--flag]` or `...`: not run. A synopsis may
  stand only in a plain ``` block or in prose; a ```bash block holds runnable commands only.
- `make test` is this suite; `make <target>` runs the target's recipe from the Makefile.
- The shrink rule, the same for every command:
  - train.py, eval.py and generate.py get the config's `smoke` variant (`:smoke`, or `,smoke`
    after other variants); train.py loses `--config.total_steps` / `--config.optim.warmup_steps`;
  - scripts in bench/, experiments/ and scripts/ get `--smoke`;
  - pytest commands are not run (the suite runs those tests): each named file or test must
    exist, and a `-k` expression must select at least one of their tests.
- Commands run from a scratch copy of the repository (so `workdirs/...` and `/tmp/...` land in
  the copy, and the committed results are never touched), with their own data directory
  (ROFORMER_JAX_DATA_DIR). Commands on the same workdir form one group and run in order,
  training first, so `eval.py` and `generate.py` find the run they document. No documented
  command may change a committed file of the copy.
"""

import ast
import hashlib
import os
import pathlib
import re
import shlex
import shutil
import subprocess
import sys
from dataclasses import dataclass, field

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
MARKDOWN = ["README.md", *sorted(str(p.relative_to(ROOT)) for p in (ROOT / "docs").glob("*.md"))]
DOCSTRING_FILES = ["train.py", "eval.py", "generate.py", "export.py",
                   *sorted(str(p.relative_to(ROOT)) for p in (ROOT / "configs").glob("*.py")),
                   *sorted(str(p.relative_to(ROOT)) for p in (ROOT / "experiments").glob("*.py"))]
NEEDS = {"gpu", "network", "torch", "cluster"}
TIMEOUT_S = 420

_ENV_PREFIX = r"(?:[A-Z_][A-Z0-9_]*=\S+\s+)*"
# A command line. `python train.py` (eval.py, generate.py) without arguments names the program
# in prose; it is not a command (those three need --workdir, train.py --config too).
COMMAND_RE = re.compile(rf"^{_ENV_PREFIX}(?:(?:\.venv/bin/)?python3?\s+(?:-m\s+\S+|\S+\.py)(?:\s|$)|make\s+\w"
                        r"|pytest\s+\S|srun\s|gcloud\s|[\w./-]+\.py\s+-)")
PROGRAM_NAME_RE = re.compile(r"^(?:\.venv/bin/)?python3?\s+(?:\./)?(?:train|eval|generate|export)\.py$")
MARKER_RE = re.compile(r"#\s*needs:\s*([\w ,-]+?)\s*$")
SYNOPSIS_RE = re.compile(r"<[^<>\s=][^<>]*>|\[--|\[:|(?:^|\s)\.\.\.(?:\s|$|\))|\{\w+(?:,\w+)+\}")


@dataclass
class Command:
  text: str            # as documented, continuation lines joined
  source: str          # file:line
  needs: tuple = ()    # from the marker
  synopsis: bool = False
  block: str = ""      # id of the ```bash block it came from ("" for a line of its own)
  background: bool = False


def _join_continuations(lines):
  out, buf = [], ""
  for line in lines:
    if line.rstrip().endswith("\\"):
      buf += line.rstrip()[:-1].strip() + " "
    else:
      out.append((buf + line.strip()).strip())
      buf = ""
  if buf:
    out.append(buf.strip())
  return out


def _command(text, source, block=""):
  text = " ".join(text.split())
  if re.match(r"^[\w./-]+\.py\s", text):  # `bench/x.py --flag` in prose: run with python
    text = "python " + text
  needs = ()
  marker = MARKER_RE.search(text)
  if marker:
    needs = tuple(n.strip() for n in marker.group(1).split(",") if n.strip())
  return Command(text=text, source=source, needs=needs, synopsis=bool(SYNOPSIS_RE.search(text)),
                 block=block, background=text.split("#")[0].rstrip().endswith("&"))


def _is_command(text):
  return bool(COMMAND_RE.match(text)) and not PROGRAM_NAME_RE.match(text)


def _inline_spans(text):
  """Inline code spans (a span may wrap onto the next line, as markdown allows)."""
  return [(m.start(), m.group(1)) for m in re.finditer(r"(?<!`)`([^`]+)`(?!`)", text)]


def collect_markdown(name, text=None):
  text = (ROOT / name).read_text() if text is None else text
  commands, problems = [], []
  fence = re.compile(r"^```([\w-]*)[^\n]*\n(.*?)^```[ \t]*$", re.S | re.M)
  for m in fence.finditer(text):
    lang, body = m.group(1), m.group(2)
    line0 = text.count("\n", 0, m.start()) + 2
    if lang in ("bash", "sh", "shell"):
      for line in _join_continuations(body.splitlines()):
        if line and not line.startswith("#"):
          cmd = _command(line, f"{name}:{line0}", block=f"{name}:{line0}")
          if cmd.synopsis and not cmd.needs:
            problems.append(f"{cmd.source}: a ```bash block holds runnable commands only, but "
                            f"{cmd.text!r} is a synopsis; put it in a plain ``` block")
          commands.append(cmd)
    elif lang == "":
      for line in _join_continuations(body.splitlines()):
        if _is_command(line) and not SYNOPSIS_RE.search(line) and not MARKER_RE.search(line):
          problems.append(f"{name}:{line0}: {line!r} is in a plain ``` block but is not a synopsis "
                          "(no <placeholder>); put runnable commands in a ```bash block")
  prose = fence.sub(lambda m: "\n" * m.group(0).count("\n"), text)
  for start, span in _inline_spans(prose):
    span = " ".join(span.split())
    if _is_command(span):
      commands.append(_command(span, f"{name}:{prose.count(chr(10), 0, start) + 1}"))
  return commands, problems


def collect_docstring(name):
  tree = ast.parse((ROOT / name).read_text())
  doc = ast.get_docstring(tree, clean=False) or ""
  commands = []
  for line in _join_continuations(doc.splitlines()):
    stripped = line.strip()
    if _is_command(stripped):
      commands.append(_command(stripped, f"{name}:docstring"))
  for _start, span in _inline_spans(doc):
    span = " ".join(span.split())
    if _is_command(span):
      commands.append(_command(span, f"{name}:docstring"))
  return commands


def collect_all():
  commands, problems = [], []
  for name in MARKDOWN:
    c, p = collect_markdown(name)
    commands += c
    problems += p
  for name in DOCSTRING_FILES:
    commands += collect_docstring(name)
  return commands, problems


# ---- the shrink rule ----------------------------------------------------------------------------

def _make_recipes():
  """target -> recipe lines of the Makefile, with $(PY) as `python`."""
  recipes, target = {}, None
  for line in (ROOT / "Makefile").read_text().splitlines():
    m = re.match(r"^([\w.-]+):", line)
    if m and not line.startswith("\t"):
      target = m.group(1)
      recipes[target] = []
    elif line.startswith("\t") and target:
      recipes[target].append(line.strip().replace("$(PY)", "python"))
  return recipes


def _strip_comment(text):
  # Commands never contain '#' except in comments (quoted dict literals have no '#').
  return text.split(" #")[0].strip() if " #" in text else text


def shrink(text):
  """The documented command -> the command this test runs (one shell line), or None to skip."""
  text = _strip_comment(text)
  for op in (" && ", " | "):  # shrink each command of a chain or a pipe
    if op in text:
      return op.join(filter(None, (shrink(part) for part in text.split(op))))
  background = text.endswith("&")
  text = text.rstrip("&").strip()
  parts = shlex.split(text)
  env = []
  while parts and re.match(r"^[A-Z_][A-Z0-9_]*=", parts[0]):
    env.append(parts.pop(0))
  if parts[:1] == ["echo"]:
    return text
  if parts[:1] == ["make"]:
    recipes = _make_recipes()
    lines = []
    for target in parts[1:]:
      if target not in recipes:
        raise AssertionError(f"make target {target!r} is documented but not in the Makefile")
      lines += [shrink(line) for line in recipes[target] if "python" in line]
    return " && ".join(line for line in lines if line) or None
  if _is_pytest(parts):
    return None  # checked by test_documented_pytest_commands_select_tests, not run

  script = next((p for p in parts if p.endswith(".py")), "")
  base = os.path.basename(script)
  if base in ("train.py", "eval.py", "generate.py"):
    for i, p in enumerate(parts):
      for prefix in ("--config=", "--config"):
        if p == "--config" and i + 1 < len(parts):
          parts[i + 1] = _smoke_config(parts[i + 1])
          break
        if p.startswith("--config=") and prefix == "--config=":
          parts[i] = "--config=" + _smoke_config(p[len("--config="):])
          break
    if base == "train.py":  # the smoke variant fixes the run's length (2 steps)
      parts = [p for p in parts if not p.startswith(RUN_LENGTH_FLAGS)]
  elif script.split("/")[0].lstrip("./") in ("bench", "experiments", "scripts") or \
      os.path.dirname(script.lstrip("./")) in ("bench", "experiments", "scripts"):
    if "--smoke" not in parts:
      parts.append("--smoke")
  line = " ".join(map(shlex.quote, env + parts))
  return line + (" &" if background else "")


# A documented training length (and its warmup) gives way to the smoke variant's two steps.
RUN_LENGTH_FLAGS = ("--config.total_steps=", "--config.optim.warmup_steps=")


def _is_pytest(parts):
  return parts[:1] == ["pytest"] or parts[1:3] == ["-m", "pytest"]


def _smoke_config(arg):
  path, _, variants = arg.partition(":")
  names = [v for v in variants.split(",") if v]
  if "smoke" not in names:
    names.append("smoke")
  return f"{path}:{','.join(names)}"


def workdir_of(text):
  m = re.search(r"--workdir[= ](\S+)", text)
  if m:
    return m.group(1).rstrip("/")
  m = re.search(r"(?:^|[\s=])(workdirs/[\w.-]+)", text)  # e.g. `summarize.py --record-default-run workdirs/x`
  if m:
    return m.group(1)
  if text.split()[:2] == ["make", "train"]:
    return workdir_of(" ".join(_make_recipes()["train"]))
  return None


def _trains(text):
  return bool(re.search(r"(?:^|\s)(?:\S*/)?train\.py\s", text)) or text.startswith("make train")


@dataclass
class Group:
  key: str
  commands: list = field(default_factory=list)  # list of (shell line, [Command, ...])


# Flags of experiments/run.py whose value its --smoke overrides: commands that differ only in
# them run the same smoke test.
SMOKE_SIZE_FLAGS = ("--steps", "--seeds", "--targets")


def _key(line):
  """What a shrunk command does, for finding the same command documented twice: the environment
  prefix (GLIBC_TUNABLES), the python spelling, and `--record` and `--publish` (no-ops with
  --smoke: a smoke run never writes a committed file) aside."""
  parts = []
  for part in line.split(" && "):
    words = part.split()
    while words and re.match(r"^[A-Z_][A-Z0-9_]*=", words[0]):
      words.pop(0)
    words = ["python" if re.fullmatch(r"(?:\.venv/bin/)?python3?", w) else w for w in words]
    if words[:1] == ["pytest"]:
      words = ["python", "-m", *words]
    if "--smoke" in words:  # --smoke fixes the size of the run and records nothing
      kept = []
      for w in words:
        if kept and kept[-1] in SMOKE_SIZE_FLAGS and "experiments/run.py" in words:
          kept.pop()
        elif w not in ("--record", "--publish"):
          kept.append(w)
      words = kept
    parts.append(" ".join(words))
  return " && ".join(parts)


def _marked(commands):
  """The commands marked `# needs:` somewhere: the same command is skipped wherever it appears."""
  return {_key(_strip_comment(c.text)): c.needs for c in commands if c.needs}


def build_groups(commands):
  """Runnable commands, deduplicated after shrinking, grouped by workdir (or ```bash block)."""
  marked = _marked(commands)
  runnable, seen = [], {}
  for cmd in commands:
    if cmd.needs or cmd.synopsis or cmd.text.split()[:2] == ["make", "test"]:
      continue
    if _key(_strip_comment(cmd.text)) in marked:
      continue
    try:
      line = shrink(cmd.text)
    except (AssertionError, ValueError) as e:  # e.g. a make target that does not exist
      PROBLEMS.append(f"{cmd.source}: {cmd.text!r}: {e}")
      continue
    if not line:
      continue
    key = _key(line)
    if key in seen:
      seen[key][1].append(cmd)
      continue
    seen[key] = (line, [cmd])
    runnable.append(seen[key])
  # A lone command that a chain (e.g. `make bench`) already runs is covered by it.
  in_chains = {part for key in seen if " && " in key for part in key.split(" && ")}
  groups, block_key = {}, {}
  together = {c.block for c in commands if c.block and c.background}
  for line, cmds in runnable:
    cmd = cmds[0]
    key = workdir_of(cmd.text) or (cmd.block if cmd.block else cmd.text)
    if cmd.block in together:  # a ```bash block with a `&` runs as one group (two processes together)
      key = block_key.setdefault(cmd.block, key)
    groups.setdefault(key, Group(key)).commands.append((line, cmds))
  # A part of a chain without a workdir (e.g. `bench/decode.py && bench/report.py`) that a longer
  # chain (`make bench`) runs is not run again.
  covered = set()
  for group in sorted(groups.values(), key=lambda g: -sum(len(l.split(" && ")) for l, _ in g.commands)):
    if workdir_of(group.commands[0][1][0].text):
      continue
    commands = []
    for line, cmds in group.commands:
      parts = [p for p in line.split(" && ") if _key(p) not in covered]
      if parts:
        commands.append((" && ".join(parts), cmds))
    covered.update(_key(p) for line, _ in group.commands for p in line.split(" && "))
    group.commands = commands
  groups = {k: g for k, g in groups.items() if g.commands}
  kept, lone = [], set()
  trained_in_groups = {re.sub(r"--workdir[= ]\S+", "--workdir W", _key(line)) for g in groups.values()
                       if len(g.commands) > 1 for line, _ in g.commands if _trains(line)}
  for group in sorted(groups.values(), key=lambda g: g.key):
    group.commands.sort(key=lambda item: 0 if _trains(item[1][0].text) else 1)  # training first
    done, commands = set(), []
    for line, cmds in group.commands:  # a chain's part that already ran in this group is not rerun
      parts = [p for p in line.split(" && ") if _key(p) not in done]
      done.update(_key(p) for p in parts)
      if parts:
        commands.append((" && ".join(parts), cmds))
    group.commands = commands
    if len(group.commands) == 1:
      line = group.commands[0][0]
      # the same training in another workdir that nothing else reads is the same test
      key = re.sub(r"--workdir[= ]\S+", "--workdir W", _key(line))
      if key in in_chains or key in lone or key in trained_in_groups:
        continue
      lone.add(key)
    kept.append(group)
  return kept


COMMANDS, PROBLEMS = collect_all()
PYTEST_COMMANDS = [c for c in COMMANDS if not c.needs and not c.synopsis
                   and _is_pytest([w for w in shlex.split(_strip_comment(c.text)) if "=" not in w or w.startswith("-")])]
GROUPS = build_groups(COMMANDS)


def _digest_tree(root, names):
  return {n: hashlib.sha256((root / n).read_bytes()).hexdigest() for n in names if (root / n).is_file()}


def _tracked_files():
  try:
    out = subprocess.run(["git", "ls-files", "-co", "--exclude-standard"], cwd=ROOT, check=True,
                         capture_output=True, text=True).stdout
    return [n for n in out.splitlines() if (ROOT / n).is_file()]
  except (OSError, subprocess.CalledProcessError):
    skip = {".venv", ".git", "workdirs", "experiments/runs", "__pycache__", ".pytest_cache", ".cache"}
    return [str(p.relative_to(ROOT)) for p in ROOT.rglob("*")
            if p.is_file() and not any(part in skip for part in p.relative_to(ROOT).parts)]


def _scratch_copy(dest):
  names = _tracked_files()
  for name in names:
    (dest / name).parent.mkdir(parents=True, exist_ok=True)
    shutil.copy2(ROOT / name, dest / name)
  venv = pathlib.Path(sys.prefix)
  (dest / ".venv").symlink_to(venv)  # `.venv/bin/python ...` as the docs write it
  (dest / "tmp").mkdir()
  return names


def _run_group(group, tmp_path, cache_dir):
  copy = tmp_path / "repo"
  copy.mkdir()
  names = _scratch_copy(copy)
  before = _digest_tree(copy, names)
  env = dict(os.environ)
  env.update(JAX_PLATFORMS="cpu", ROFORMER_JAX_DATA_DIR=str(copy / ".data"),
             JAX_COMPILATION_CACHE_DIR=str(cache_dir), JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS="0",
             MPLBACKEND="Agg", PYTHONDONTWRITEBYTECODE="1",
             PATH=f"{pathlib.Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}")
  env["XLA_FLAGS"] = "--xla_backend_optimization_level=0"  # none of the caller's; conftest.py says why
  script = []
  for line, _ in group.commands:
    script.append(line.replace("/tmp/", f"{copy}/tmp/"))
  body = "set -e\n" + "\n".join(script) + "\nwait\n"
  result = subprocess.run(["bash", "-c", body], cwd=copy, env=env, capture_output=True, text=True,
                          timeout=TIMEOUT_S * len(script))
  sources = "; ".join(f"{cmds[0].text}  ({', '.join(c.source for c in cmds)})" for _, cmds in group.commands)
  assert result.returncode == 0, (
      f"documented command(s) failed (exit {result.returncode}): {sources}\nran:\n{body}\n"
      f"--- stdout (tail) ---\n{result.stdout[-3000:]}\n--- stderr (tail) ---\n{result.stderr[-6000:]}")
  changed = [n for n, h in _digest_tree(copy, names).items() if before.get(n) != h]
  assert not changed, f"documented command(s) changed committed files {changed}: {sources}"


# ---- tests --------------------------------------------------------------------------------------

def test_docs_have_no_misplaced_commands_and_no_pointer_outside_the_repository():
  assert not PROBLEMS, "\n".join(PROBLEMS)
  bad_markers = [f"{c.source}: {c.text}" for c in COMMANDS if set(c.needs) - NEEDS]
  assert not bad_markers, f"unknown `# needs:` markers (known: {sorted(NEEDS)}): {bad_markers}"
  outside = [f"{name}:{i + 1}" for name in MARKDOWN
             for i, line in enumerate((ROOT / name).read_text().splitlines()) if "../shared" in line]
  assert not outside, f"the docs point outside the repository: {outside}"


def test_the_collector_finds_the_documented_commands():
  """Guards the collector itself: commands known to be documented are found and runnable."""
  runnable = {line for g in GROUPS for line, _ in g.commands}
  assert any("train.py --config configs/default.py:smoke --workdir workdirs/default" in r for r in runnable)
  assert any("generate.py --workdir workdirs/default" in r for r in runnable)  # the run's own config (issue 40)
  assert len(GROUPS) >= 5, [g.key for g in GROUPS]


def test_shrink_rule():
  assert shrink("python train.py --config configs/glue.py:mrpc --workdir W") == \
      "python train.py --config configs/glue.py:mrpc,smoke --workdir W"
  assert shrink("python eval.py --config=configs/default.py --workdir W") == \
      "python eval.py --config=configs/default.py:smoke --workdir W"
  assert shrink(".venv/bin/python bench/rope.py --record") == ".venv/bin/python bench/rope.py --record --smoke"
  assert shrink("python experiments/run.py e2  # MLM") == "python experiments/run.py e2 --smoke"
  assert shrink("python train.py --config configs/default.py --workdir W --config.total_steps=20 "
                "--config.optim.warmup_steps=5 --config.batch_size=1") == \
      "python train.py --config configs/default.py:smoke --workdir W --config.batch_size=1"
  assert shrink("make train") == "python train.py --config configs/default.py:smoke --workdir workdirs/default"
  assert shrink(".venv/bin/python -m pytest -n 2 tests/test_rope.py") is None  # checked, not run
  cmds, problems = collect_markdown("x.md", "a `python train.py --config c.py --workdir W # needs: gpu` b\n"
                                    "```bash\npython eval.py --config <name>.py\n```\n"
                                    "```\npython train.py --config c.py --workdir W\n```\n")
  assert cmds[-1].needs == ("gpu",) and len(problems) == 2, (cmds, problems)


@pytest.fixture(scope="session")
def compile_cache(tmp_path_factory):
  # One persistent XLA cache for all groups: the suite's (tests/conftest.py), or else one shared
  # by the xdist workers (the parent of their basetemps). A smoke model is compiled once.
  if os.environ.get("JAX_COMPILATION_CACHE_DIR"):
    return pathlib.Path(os.environ["JAX_COMPILATION_CACHE_DIR"])
  path = tmp_path_factory.getbasetemp().parent / "docs_xla_cache"
  path.mkdir(exist_ok=True)
  return path


@pytest.mark.slow
@pytest.mark.parametrize("group", GROUPS, ids=[g.key for g in GROUPS])
def test_documented_commands_run(group, tmp_path, compile_cache):
  if any("gettext_translate" in line for line, _ in group.commands) and \
      not list(pathlib.Path("/usr/share/locale/de/LC_MESSAGES").glob("*.mo")):
    pytest.skip("no German gettext catalogues on this machine (/usr/share/locale/de/LC_MESSAGES)")
  _run_group(group, tmp_path, compile_cache)


PYTHON_BLOCKS = [(name, i, block) for name in MARKDOWN
                 for i, block in enumerate(re.findall(r"^```python\n(.*?)^```", (ROOT / name).read_text(),
                                                      flags=re.S | re.M))]


@pytest.mark.parametrize("name,index,block", PYTHON_BLOCKS,
                         ids=[f"{n}#{i}" for n, i, _ in PYTHON_BLOCKS])
def test_python_snippets_run(name, index, block, capsys, monkeypatch):
  """Each ```python block runs as written from the repository root; `print(x)  # value` lines
  must print that value."""
  monkeypatch.chdir(ROOT)
  exec(compile(block, f"{name} (python block {index})", "exec"), {"__name__": "docs"})
  out = capsys.readouterr().out
  expected = re.findall(r"^[ \t]*print\(.*\)[ \t]*#[ \t]*(.+?)[ \t]*$", block, flags=re.M)
  for value in expected:
    assert value in out, f"{name} python block {index}: expected {value!r} in the output, got {out!r}"


FRESH_PROCESS_BLOCKS = [(name, block) for name in MARKDOWN
                        for block in re.findall(r"^```py\n(.*?)^```", (ROOT / name).read_text(), flags=re.S | re.M)]


@pytest.mark.parametrize("name,block", FRESH_PROCESS_BLOCKS, ids=[n for n, _ in FRESH_PROCESS_BLOCKS])
def test_fresh_process_snippets_run(name, block):
  """A ```py block must run before JAX's backend starts (fake CPU devices): it runs in a new Python process, and
  its `print(x)  # value` lines must print that value."""
  out = subprocess.run([sys.executable, "-c", block], capture_output=True, text=True, timeout=120, cwd=ROOT,
                       env={k: v for k, v in os.environ.items() if k != "XLA_FLAGS"})
  assert out.returncode == 0, out.stderr
  for value in re.findall(r"^[ \t]*print\(.*\)[ \t]*#[ \t]*(.+?)[ \t]*$", block, flags=re.M):
    assert value in out.stdout, f"{name}: expected {value!r}, got {out.stdout!r}"


@pytest.mark.parametrize("cmd", PYTEST_COMMANDS, ids=[c.text for c in PYTEST_COMMANDS])
def test_documented_pytest_commands_select_tests(cmd):
  """A documented pytest command names files (or node ids) that exist, and its -k selects tests."""
  from _pytest.mark.expression import Expression  # pytest's own -k grammar
  words = shlex.split(_strip_comment(cmd.text))
  words = words[words.index("pytest") + 1:]
  keyword, targets, skip_next = None, [], False
  for i, w in enumerate(words):
    if skip_next:
      skip_next = False
    elif w == "-k":
      keyword, skip_next = words[i + 1], True
    elif w in ("-n", "-p", "--durations"):
      skip_next = True
    elif not w.startswith("-"):
      targets.append(w)
  assert targets, f"{cmd.source}: {cmd.text!r} names no test file"
  names = []
  for target in targets:
    path, _, node = target.partition("::")
    assert (ROOT / path).exists(), f"{cmd.source}: {cmd.text!r}: {path} does not exist"
    files = [ROOT / path] if (ROOT / path).is_file() else sorted((ROOT / path).glob("test_*.py"))
    tests = [n for f in files for n in re.findall(r"^\s*(?:def|class) (Test\w*|test_\w*)", f.read_text(), flags=re.M)]
    if node:
      assert node.split("::")[0].split("[")[0] in tests, f"{cmd.source}: {cmd.text!r}: no test {node}"
    names += tests
  if keyword:
    expression = Expression.compile(keyword)
    assert any(expression.evaluate(lambda k, name=name: k.lower() in name.lower()) for name in names), (
        f"{cmd.source}: {cmd.text!r}: -k {keyword!r} selects no test")
