"""The README's Python example runs as written (keeps the README true)."""

import pathlib
import re


def test_readme_python_blocks_run(capsys, monkeypatch):
  root = pathlib.Path(__file__).parents[1]
  monkeypatch.chdir(root)  # the README's paths are relative to the repository root
  text = (root / "README.md").read_text()
  blocks = re.findall(r"```python\n(.*?)```", text, flags=re.S)
  assert blocks, "README has no python example"
  for block in blocks:
    exec(compile(block, "README.md", "exec"), {"__name__": "readme"})
  out = capsys.readouterr().out
  assert "(2, 16, 64)" in out and "(2, 8)" in out and "(2, 4, 32)" in out
