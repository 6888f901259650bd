#!/usr/bin/env python3
"""The readahead window's cap said once at mount (fs_core.c, log_readahead): the fetch
scheduler's rules keep a reader's readahead window within [one chunk, an eighth of
--cache-size] (--help: "at most 1/8 of --cache-size"); a mount whose --readahead (given or the
default) is outside says what was asked and what is used, in one log line, and a mount whose
--readahead is used as given says nothing. A mount of a fault:// store (remote in all but the
network) of 2 shards, --warm off, each case on a cache directory of its own:

  --cache-size 8M --readahead 64M     "--readahead 64.00 MiB is more than an eighth of
                                      --cache-size 8.00 MiB: a reader's readahead window is
                                      at most 1.00 MiB", once
  --cache-size 8M                     the same with "256.00 MiB (the default)"
  --cache-size 1G --chunk-size 8M --readahead 1M
                                      "--readahead 1.00 MiB is less than one chunk
                                      (--chunk-size 8.00 MiB): ... at most 8.00 MiB", once
  --cache-size 1G --readahead 64M     no line (64 MiB is used)
  a local source, --cache-size 8M --readahead 64M
                                      no line (nothing is fetched ahead)

Each case reads a member and checks its bytes. Before log_readahead: no line in any case (6
checks fail). Exit: 0 pass, 1 fail, 77 skip (no usable /dev/fuse).
"""

import sys
sys.dont_write_bytecode = True

import os  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', 'lib'))
from shardfs_test import mount as ml  # noqa: E402
from shardfs_test.mount import log  # noqa: E402

CAP = ("--readahead %s is more than an eighth of --cache-size %s: a reader's readahead window "
       "is at most %s")
CHUNK = ("--readahead %s is less than one chunk (--chunk-size %s): a reader's readahead window "
         "is at most %s")

CASES = [
    ('asked above the cap', 'fault', ['--cache-size', '8M', '--readahead', '64M'],
     CAP % ('64.00 MiB', '8.00 MiB', '1.00 MiB')),
    ('default above the cap', 'fault', ['--cache-size', '8M'],
     CAP % ('256.00 MiB (the default)', '8.00 MiB', '1.00 MiB')),
    ('asked below a chunk', 'fault', ['--cache-size', '1G', '--chunk-size', '8M',
                                      '--readahead', '1M'],
     CHUNK % ('1.00 MiB', '8.00 MiB', '8.00 MiB')),
    ('used as asked', 'fault', ['--cache-size', '1G', '--readahead', '64M'], None),
    ('local source', 'local', ['--cache-size', '8M', '--readahead', '64M'], None),
]


def run(env, ck):
    src = env.path('src')
    os.makedirs(src)
    members = {}
    for k in range(2):
        data = bytes([65 + k]) * 5000
        members[k] = data
        ml.write_file(os.path.join(src, 's%d.tar' % k), ml.tar_bytes([('m.bin', data)]))
    for i, (label, kind, opts, want) in enumerate(CASES):
        cache = env.path('cache-%d' % i)
        source = 'fault://' + src if kind == 'fault' else src
        with ml.Mount(env, source, cache_dir=cache, extra=opts + ['--warm', 'off']) as m:
            with open(os.path.join(m.mnt, 's1', 'm.bin'), 'rb') as f:
                ck.eq('%s: bytes' % label, f.read(), members[1])
        lines = [ln for ln in ml.logs_under(cache).splitlines() if '--readahead' in ln]
        log('%s: %r' % (label, lines))
        if want is None:
            ck.eq('%s: log lines about --readahead' % label, lines, [])
        else:
            ck.eq('%s: log lines about --readahead' % label, len(lines), 1)
            ck.ok(lines and lines[0].endswith('info: ' + want),
                  '%s: the line is %r, not "%s"' % (label, lines[:1], want))


if __name__ == '__main__':
    ml.main_wrapper(run, sys.argv[1], 'readahead-log', deadline=120)
