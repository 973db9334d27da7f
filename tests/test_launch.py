"""Multi-process start-up (launch.py): where the coordinator listens, mutual TLS, a peer's death.

Each test runs real processes on localhost with launch.initialize() and no model, so a
two-process test costs a few seconds (JAX's import), not a training run's compile. The
fault campaign (scripts/fault_campaign.py) kills real training runs.
"""

import ipaddress
import json
import os
import pathlib
import shutil
import signal
import socket
import subprocess
import sys
import time

import pytest

from roformer_jax import errors
from roformer_jax.training import launch

ROOT = pathlib.Path(__file__).parents[1]

# A program that starts like train.py (launch.run, launch.initialize), then, per its first
# argument: "listen" (process 0 prints its listening sockets on the port and, with a CA file,
# whether a TLS handshake with the coordinator succeeds) or "loop" (note steps until killed).
PROGRAM = r'''
import json, os, ssl, socket, sys, time
from roformer_jax.training import launch
try:
  from roformer_jax.training import peers
except ImportError:  # before peers.py existed
  peers = None

def listening(port):
  """(address, port) of every listening TCP socket on `port`, from /proc/net/tcp{,6}."""
  import ipaddress
  found = []
  for name, width in (("/proc/net/tcp", 4), ("/proc/net/tcp6", 16)):
    for line in open(name).read().splitlines()[1:]:
      local, state = line.split()[1], line.split()[3]
      address, p = local.split(":")
      if state != "0A" or int(p, 16) != port:
        continue
      raw = bytes.fromhex(address)
      raw = b"".join(raw[i:i + 4][::-1] for i in range(0, len(raw), 4))  # host-order words
      found.append(str(ipaddress.ip_address(raw)))
  return found

def main(argv):
  mode, arg = argv[1], argv[2]
  launch.initialize()
  import jax
  port = int(launch.flags.FLAGS.coordinator_address.rpartition(":")[2])
  if mode == "listen":
    if jax.process_index() == 0:
      report = {"listening": listening(port)}
      if arg != "-":  # a TLS handshake against the CA: it fails if the service speaks plain gRPC
        context = ssl.create_default_context(cafile=arg)
        context.set_alpn_protocols(["h2"])
        try:
          with socket.create_connection(("127.0.0.1", port), timeout=5) as raw:
            with context.wrap_socket(raw, server_hostname="127.0.0.1") as tls:
              report["tls"] = tls.version()
        except (ssl.SSLError, OSError) as e:
          report["tls"] = f"failed: {e}"
      print("REPORT " + json.dumps(report), flush=True)
    return
  if peers is not None:
    peers.note_checkpoints(arg)
  print("READY", flush=True)
  for step in range(1, 10**9):
    if peers is not None:
      peers.note_step(step)
    time.sleep(0.02)

launch.run(main)
'''


def _free_port():
  with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    return s.getsockname()[1]


def _start(tmp_path, args, *flags, processes=(0, 1)):
  program = tmp_path / "program.py"
  program.write_text(PROGRAM)
  env = {**os.environ, "JAX_PLATFORMS": "cpu", "PYTHONPATH": str(ROOT)}
  return [subprocess.Popen([sys.executable, str(program), *flags, "--num_processes", "2", "--process_id", str(i),
                            "--", *args], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
          for i in processes]


def _report(out):
  lines = [line for line in out.splitlines() if line.startswith("REPORT ")]
  assert lines, out
  return json.loads(lines[-1].removeprefix("REPORT "))


# --------------------------------------------------------------------------------------
# Where the coordinator listens
# --------------------------------------------------------------------------------------


@pytest.mark.slow
def test_the_coordinator_listens_only_on_the_loopback_address_it_was_given(tmp_path):
  """JAX binds [::]:port (every interface) unless told otherwise; launch binds the given host."""
  port = _free_port()
  procs = _start(tmp_path, ["listen", "-"], "--coordinator_address", f"127.0.0.1:{port}")
  outs = [p.communicate(timeout=120)[0] for p in procs]
  assert [p.returncode for p in procs] == [0, 0], "\n----\n".join(outs)
  listening = _report(outs[0])["listening"]
  # IPv4 on an IPv6 socket reads ::ffff:127.0.0.1; every interface reads 0.0.0.0 or ::.
  addresses = [ipaddress.ip_address(a) for a in listening]
  addresses = [getattr(a, "ipv4_mapped", None) or a for a in addresses]
  assert addresses and all(a.is_loopback for a in addresses), listening


def test_the_bind_address_is_a_local_address_or_a_clear_error():
  assert launch.bind_address("127.0.0.1:1234") == "127.0.0.1:1234"
  assert launch.bind_address("localhost:1234") in ("127.0.0.1:1234", "[::1]:1234")
  # 203.0.113.0/24 is TEST-NET-3: never an address of this machine.
  with pytest.raises(errors.UserError, match=r"203\.0\.113\.7 is not an address of this machine.*"
                     r"--coordinator_bind_address.*\[::\]:1234"):
    launch.bind_address("203.0.113.7:1234")
  with pytest.raises(errors.UserError, match="expected host:port"):
    launch.bind_address("localhost")


@pytest.mark.slow
def test_only_process_0_needs_the_coordinator_address_to_be_local(tmp_path):
  """On a cluster the coordinator's address is another machine's: process 1 must not refuse it.
  (It then tries to connect, which JAX logs; the test stops it there.)"""
  (proc,) = _start(tmp_path, ["listen", "-"], "--coordinator_address", "203.0.113.7:1234", processes=(1,))
  try:
    lines = []
    while not lines or lines[-1] and "Connecting to JAX distributed service on 203.0.113.7:1234" not in lines[-1]:
      lines.append(proc.stdout.readline())
  finally:
    proc.kill()
    proc.wait()
  assert lines[-1], "".join(lines)  # it ended before connecting: the flag checks refused


def _certificates(directory):
  """A CA, and a certificate it signed for 127.0.0.1 (used by every process), with openssl."""
  def openssl(*args):
    subprocess.run(["openssl", *args], cwd=directory, check=True, capture_output=True)
  openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key", "-out", "ca.pem", "-days", "1",
          "-subj", "/CN=test-ca")
  openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", "node.key", "-out", "node.csr", "-subj", "/CN=node")
  (directory / "ext.cnf").write_text("subjectAltName=IP:127.0.0.1\n")
  openssl("x509", "-req", "-in", "node.csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial", "-out",
          "node.pem", "-days", "1", "-extfile", "ext.cnf")
  return {"--mtls_cert_file": directory / "node.pem", "--mtls_key_file": directory / "node.key",
          "--mtls_ca_file": directory / "ca.pem"}


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("openssl") is None, reason="needs openssl to make certificates")
def test_mutual_tls_flags_reach_the_coordination_service(tmp_path):
  files = _certificates(tmp_path)
  port = _free_port()
  mtls = [str(x) for item in files.items() for x in item]
  procs = _start(tmp_path, ["listen", str(files["--mtls_ca_file"])], "--coordinator_address", f"127.0.0.1:{port}",
                 *mtls)
  outs = [p.communicate(timeout=120)[0] for p in procs]
  assert [p.returncode for p in procs] == [0, 0], "\n----\n".join(outs)
  assert _report(outs[0])["tls"].startswith("TLS"), outs[0]  # the service speaks TLS with the CA's certificate


@pytest.mark.parametrize("flags, message", [
    (["--mtls_cert_file", "cert.pem"], "missing --mtls_key_file, --mtls_ca_file"),
    (["--mtls_cert_file", "nope.pem", "--mtls_key_file", "k", "--mtls_ca_file", "c"],
     "--mtls_cert_file=nope.pem: no such file"),
    (["--heartbeat_timeout_seconds", "0"], "--heartbeat_timeout_seconds=0: expected a whole number of seconds >= 1"),
    (["--coordinator_address", "203.0.113.7:1234"], "is not an address of this machine"),
])
@pytest.mark.slow
def test_bad_multi_process_flags_are_clear_errors(tmp_path, flags, message):
  address = ["--coordinator_address", f"127.0.0.1:{_free_port()}"] if "--coordinator_address" not in flags else []
  (proc,) = _start(tmp_path, ["listen", "-"], *address, *flags, processes=(0,))
  try:
    out = proc.communicate(timeout=60)[0]
  finally:
    proc.kill()
    proc.wait()
  assert proc.returncode == 2 and message in out and "Traceback" not in out, out


# --------------------------------------------------------------------------------------
# A peer's death
# --------------------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("killed", [1, 0])
def test_a_dead_peer_stops_the_survivor_with_one_line_to_act_on(tmp_path, killed):
  """SIGKILL one of two processes: the other exits 1 within the heartbeat timeout, naming the dead
  process, its step and the checkpoint to resume from (JAX's own abort is exit 134 with a C++
  stack trace, 100 s after the death by default)."""
  checkpoints = tmp_path / "checkpoints"
  for step in ("35", "40", "45.orbax-checkpoint-tmp-1"):  # the last is an uncommitted save
    (checkpoints / step).mkdir(parents=True)
  timeout = 4
  procs = _start(tmp_path, ["loop", str(checkpoints)], "--coordinator_address", f"127.0.0.1:{_free_port()}",
                 "--heartbeat_timeout_seconds", str(timeout))
  try:
    for p in procs:  # both started (INFO lines may come first), and beating for a while
      head = [p.stdout.readline()]
      while head[-1] and not head[-1].startswith("READY"):
        head.append(p.stdout.readline())
      assert head[-1], "".join(head)  # the process ended before READY
    time.sleep(2)
    procs[killed].send_signal(signal.SIGKILL)
    killed_at = time.monotonic()
    survivor = procs[1 - killed]
    out = survivor.communicate(timeout=60)[0]
    took = time.monotonic() - killed_at
  finally:
    for p in procs:
      if p.poll() is None:
        p.kill()
      p.wait()
  assert survivor.returncode == 1, out
  assert took < timeout + 5, (took, out)
  last = out.strip().splitlines()[-1]
  coordinator = " (the coordinator, 127.0.0.1:" if killed == 0 else " stopped"
  assert last.startswith(f"program.py: stopped: process {killed}{coordinator}"), out
  assert " stopped answering at step " in last, out
  resume = f"re-run every process with the same command to resume from checkpoint 40 (in {checkpoints})."
  assert last.endswith(resume), out  # 45 is a save in flight: not resumable


def test_a_bracketed_override_that_is_no_literal_is_named_and_strings_are_left_alone():
  """launch._check_literals: ml_collections keeps a malformed literal as text for a non-string key; it is refused
  naming the flag, its text and the parser's reason. A good literal, a string key and an unbracketed text pass."""
  import ml_collections

  config = ml_collections.ConfigDict({"model": {"rope_scaling": ml_collections.config_dict.placeholder(object),
                                                "name": "x"}})
  config.model.rope_scaling = "{'rope_type': 'yarn'"  # what ml_collections leaves of the malformed text
  with pytest.raises(ValueError, match=r"--config.model.rope_scaling: the text .* is not a Python literal \('\{' "
                                       r"was never closed\)"):
    launch._check_literals(config, ["eval.py", "--config.model.rope_scaling={'rope_type': 'yarn'"])
  config.model.name = "{not a literal"
  launch._check_literals(config, ["eval.py", "--config.model.name={not a literal"])  # a string key keeps its text
  config.model.rope_scaling = {"rope_type": "yarn"}
  launch._check_literals(config, ["eval.py", "--config.model.rope_scaling={'rope_type': 'yarn'}",
                                  "--config.nothere=(1", "--workdir=(x"])


@pytest.mark.parametrize("size", [1, 2, 3, 5, 8, 13, 1000])
def test_gloos_lines_are_dropped_from_stdout_and_nothing_else_is_held(size):
  """launch.drop_lines, fed in chunks of every size: gloo's per-communicator lines go, every other byte comes
  through in order; a progress bar's partial line is written at once, not held until its newline."""
  starts = [start for fd, start, _ in launch.FD_NOISE if fd == 1]
  text = (b"lm: 0.02M parameters\n[Gloo] Rank 0 is connected to 1 peer ranks. Expected number of connected peer "
          b"ranks is : 1\n\r 50%|#####     | 1/2\r100%|##########| 2/2\n[Glo is not gloo\n[Gloo] Rank 3 is "
          b"connected to 3 peer ranks.\nfinished: steps 1..2")
  held, passing, out = b"", False, []
  for i in range(0, len(text), size):
    written, held, passing = launch.drop_lines(text[i:i + size], starts, held, passing)
    out.append(written)
  assert b"".join(out) + held == (b"lm: 0.02M parameters\n\r 50%|#####     | 1/2\r100%|##########| 2/2\n"
                                  b"[Glo is not gloo\nfinished: steps 1..2")
  assert launch.drop_lines(b"\r 50%|##", starts) == (b"\r 50%|##", b"", True)  # not held
  assert launch.drop_lines(b"[Gl", starts) == (b"", b"[Gl", False)  # may still be gloo's: held
