"""The shardfs test toolkit, shared by every Python test and by tests/bench (see ../README.md).

Modules (import the ones you need; none is imported here):
  mount       Mount/Env/Checker/main_wrapper, poll, mount_error, tree snapshots and comparisons,
              control files
  checks      Checks and skip for tests with a runner of their own (the zero-checks and skip rules)
  shardgen    shard generator of the mount tests (GNU tar, gzip, zstd)
  stress      fast ustar shards with a member catalogue, classified reads, /proc resources
  net         free_port, wait_port, stop_process; Handler, ThreadingServer, LoopbackServer: the
              Python stand-ins' HTTP server; ObjectHandler: the hostile tests' object servers
              (serve(head), answer, span/part of a Range)
  web         nginx (autoindex, redirector, TLS), make_tls; proxies: LoopbackProxy, FaultProxy,
              GateProxy, HoldProxy, SlowProxy (throttles, holds fills in flight)
  rawhttp     Scripted: an HTTP/1.x server of one object whose every answer the test builds
              (HTTP/1.0, stray bytes, a head trickled a byte per segment, a close at any byte)
  s3servers   s3rver, the SigV4-checking proxy, the AIStore stand-in
  s3world     s3rver + proxy + source for the s3/gs/ais tests, AWS env, a mount that must fail
  cloudmeta   loopback stand-ins of IMDSv2, STS, the container endpoint, GCE metadata
  dl          image trees and torchvision ImageFolder helpers
  tarref      what tarfile says of shards (members, offsets, sizes), as samples.tsv should
  stagedata   the stage tests' data: 2 shards of planned samples and filler, sidecars, a plan
  kcache      what the kernel caches of a mount held still: Delta of the request counters between
              steps, Pins (held paths) against another process's drop_caches
  planread    planned reads over sidecar-indexed shards: the shards and members' extents, their
              bytes, a SlowProxy's shard GETs and hold, a plan file written and published, a
              plan's fills ended (fetched: its ranges neither queued nor in flight)
  diag        the request lists of the running servers and proxies a failed test prints
              (mount.Env.diagnose)
  systemd     a unit file's Exec* lines as the argv systemd makes of them ($VAR, ${VAR})
  hostile     the hostile passes' (tests/mount/test_hostile1*.py) source of small shards, a client
              command checked exactly, a mount that must succeed, spawned commands followed
              (test_ctl_wait.py uses those too)
  linkemu     the link emulator of tests/bench and the link tests: Emu starts the C one
              (tests/lib/linkemu.c); the Python one it replaced stays as the reference (also a
              script): a directory, or an S3 bucket of pattern keys (S3 mode)
"""
