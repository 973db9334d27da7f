"""The README's Python example runs as written (keeps the README true)."""

import pathlib
import re


def test_readme_python_blocks_run(capsys):
  text = (pathlib.Path(__file__).parents[1] / "README.md").read_text()
  blocks = re.findall(r"```python\n(.*?)```", text, flags=re.S)
  assert blocks, "README has no python example"
  for block in blocks:
    exec(compile(block, "README.md", "exec"), {"__name__": "readme"})
  assert "(2, 16, 64)" in capsys.readouterr().out
