"""A tiny locale directory of compiled gettext catalogues (.mo), written from Python.

The .mo layout (GNU gettext manual, "The Format of GNU MO Files"): a 28-byte header (magic
0x950412de, revision 0, N strings, offsets of the original and translation tables, an empty
hash table), two tables of (length, offset) pairs sorted by original string, then the
NUL-terminated strings. The header entry (empty msgid) names the charset.
"""

from __future__ import annotations

import struct
from pathlib import Path

NUM_MESSAGES = 400  # enough for the 2%-bucket test and validation splits to hold a few each
MULTILINE = "Line one\n\tline two (9)"  # a message with a newline and a tab; it hashes into the test split


def write_mo(path: Path, entries: dict[str, str], *, charset: str = "UTF-8", encoding: str = "utf-8") -> Path:
  """Writes a .mo file; keys may hold a context ("ctx\\x04msgid") or a plural ("one\\x00many")."""
  entries = {"": f"Content-Type: text/plain; charset={charset}\nPlural-Forms: nplurals=2; plural=(n != 1);\n",
             **entries}
  keys = sorted(entries)
  ids = [k.encode(encoding) for k in keys]
  strs = [entries[k].encode(encoding) for k in keys]
  n = len(keys)
  originals_at, translations_at = 28, 28 + 8 * n
  data_at = translations_at + 8 * n
  blob, tables = b"", {"orig": [], "trans": []}
  for name, items in (("orig", ids), ("trans", strs)):
    for s in items:
      tables[name].append((len(s), data_at + len(blob)))
      blob += s + b"\0"
  header = struct.pack("<7I", 0x950412DE, 0, n, originals_at, translations_at, 0, 0)
  body = b"".join(struct.pack("<2I", *e) for e in tables["orig"] + tables["trans"])
  path.parent.mkdir(parents=True, exist_ok=True)
  path.write_bytes(header + body + blob)
  return path


# The German side carries the alphabet of real catalogues: umlauts, eszett, capitals,
# typographic quotes, dashes and symbols. Real English + German software messages need 136
# SentencePiece pieces at character coverage 1.0, which broke the 64-piece smoke vocabulary
# while a fixture of plain ASCII words passed; these words need more than 64 as well.
GERMAN_WORDS = ("Falsches Üben von Xylophonmusik quält jeden größeren Zwerg. "
                "ÄRGER ÖL ÜBER „Datei“ «Ja» ‚nein‘ Weiter… A–Z 5 °C 10 € © 2024 → ½ × μ").split()


def make_locale_dir(root: Path) -> Path:
  """de (three catalogues, one unreadable), pt_BR and sr@latin; returns root."""
  messages = {f"Message number {i}: %s": f"Nr. {i}: %s {GERMAN_WORDS[i % len(GERMAN_WORDS)]}"
              for i in range(NUM_MESSAGES)}
  messages[MULTILINE] = "Zeile eins\n\tZeile zwei"
  de = root / "de" / "LC_MESSAGES"
  write_mo(de / "alpha.mo", {**messages, "Open file": "Datei öffnen", "menu\x04Quit": "Beenden",
                             "%d file\x00%d files": "%d Datei\x00%d Dateien"})
  # "Open file" twice as "Datei öffnen" (alpha, gamma) and once otherwise: the majority wins.
  write_mo(de / "beta.mo", {"Open file": "Öffne Datei", "Save": "Speichern", "Empty": ""})
  write_mo(de / "gamma.mo", {"Open file": "Datei öffnen"})
  write_mo(de / "broken.mo", {"Color": "Farbe äöü"}, charset="UTF-8", encoding="latin-1")  # lies about its charset
  for lang in ("pt_BR", "sr@latin"):
    write_mo(root / lang / "LC_MESSAGES" / "app.mo", {f"Message number {i}: %s": f"{lang} {i}: %s"
                                                      for i in range(NUM_MESSAGES)})
  (root / "xx" / "LC_MESSAGES").mkdir(parents=True)  # a language directory without catalogues
  return root
