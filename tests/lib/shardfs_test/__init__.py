"""The shardfs test toolkit, shared by every Python test and by tests/bench (see ../README.md).

Modules (import the ones you need; none is imported here):
  mount       Mount/Env/Checker/main_wrapper, tree snapshots and comparisons, control files
  shardgen    shard generator of the mount tests (GNU tar, gzip, zstd)
  stress      fast ustar shards with a member catalogue, classified reads, /proc resources
  net         free_port, wait_port, the threading HTTP server of the stand-ins
  web         nginx (autoindex, redirector, TLS), LoopbackProxy, FaultProxy, GateProxy, make_tls
  s3servers   s3rver, the SigV4-checking proxy, the AIStore stand-in
  s3world     s3rver + proxy + source for the s3/gs/ais tests, AWS env, a mount that must fail
  cloudmeta   loopback stand-ins of IMDSv2, STS, the container endpoint, GCE metadata
  dl          image trees and torchvision ImageFolder helpers
  linkemu     the link emulator of tests/bench/link_bench.py (also a script)
"""
