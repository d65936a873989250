#!/usr/bin/env python3
"""Reads a TensorBoard event file, or a log directory, with TensorBoard's
own loader, to check that files written by `xlafn::summary::EventWriter`
are ones TensorBoard reads.

Not run in CI: it needs the `tensorboard` Python package, which the
project's machines do not install. To run it by hand:

    python3 -m venv /tmp/tb && /tmp/tb/bin/pip install tensorboard
    XLAFN_SUMMARY_SAMPLE_DIR=/tmp/tb-sample cargo test --test summary sample_for_tensorboard
    /tmp/tb/bin/python scripts/read_tensorboard_events.py /tmp/tb-sample

It prints each scalar tag's (step, value) list and each histogram's
count and sum per step, and exits with status 1 if it read no scalar and
no histogram (2 on a usage error).
"""

import sys

from tensorboard.backend.event_processing import event_accumulator as ea

# 0 keeps every event: the default guidance samples scalars and
# histograms down to a reservoir, which would hide missing steps.
SIZE_GUIDANCE = {
    ea.SCALARS: 0,
    ea.HISTOGRAMS: 0,
    ea.COMPRESSED_HISTOGRAMS: 0,
    ea.TENSORS: 0,
}


def load(path):
    """An accumulator holding every event of `path` (a file or a folder)."""
    accumulator = ea.EventAccumulator(path, size_guidance=SIZE_GUIDANCE)
    accumulator.Reload()
    return accumulator


def print_scalars(accumulator):
    """Prints each scalar tag's points; returns how many tags there were."""
    tags = accumulator.Tags()["scalars"]
    for tag in tags:
        points = [(e.step, e.value) for e in accumulator.Scalars(tag)]
        print(f"scalar {tag}: {points}")
    return len(tags)


def print_histograms(accumulator):
    """Prints each histogram's count, sum, min and max per step; returns
    how many tags there were."""
    tags = accumulator.Tags()["histograms"]
    for tag in tags:
        for event in accumulator.Histograms(tag):
            h = event.histogram_value
            print(
                f"histogram {tag} step {event.step}: count {h.num:g} sum {h.sum:g}"
                f" min {h.min:g} max {h.max:g} buckets {len(h.bucket)}"
            )
    return len(tags)


def main(argv):
    if len(argv) != 2:
        print(f"usage: {argv[0]} EVENT_FILE_OR_LOGDIR", file=sys.stderr)
        return 2
    accumulator = load(argv[1])
    found = print_scalars(accumulator) + print_histograms(accumulator)
    if found == 0:
        print(f"no scalars or histograms read from {argv[1]}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
