"""GPU idle split by cause (engine/measure/idle.py), on CPU from recorded intervals: the parts add up to the
idle, each part is what its name says, and the clock offset is read from events without a synchronize."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engine.measure.idle import clock_offset, split_idle


def _intervals(draw_floats):
    """Sorted, disjoint intervals built from gap and length pairs (how a stream or a loop lays them out)."""
    return st.lists(st.tuples(draw_floats, draw_floats), max_size=12).map(_lay_out)


def _lay_out(pairs):
    out, at = [], 0.0
    for gap, length in pairs:
        at += gap
        out.append((at, at + length))
        at += length
    return out


_SECONDS = st.floats(0.0, 0.05, allow_nan=False)


@settings(max_examples=300, deadline=None)
@given(
    gaps=_intervals(_SECONDS),
    stalls=_intervals(_SECONDS),
    waits=_intervals(_SECONDS),
    offset=st.one_of(st.none(), st.floats(-0.2, 0.2, allow_nan=False)),
)
def test_the_parts_add_up_to_the_idle_and_none_is_negative(gaps, stalls, waits, offset):
    parts = split_idle(gaps, stalls, waits, offset)
    assert parts.idle_s == pytest.approx(sum(b - a for a, b in gaps), abs=1e-9)
    assert min(parts.data_s, parts.copy_s, parts.other_s) >= 0.0
    assert parts.data_s + parts.copy_s + parts.other_s == pytest.approx(parts.idle_s, abs=1e-9)


def test_idle_while_the_host_waits_on_the_loader_is_data_wait():
    # the GPU finished step 0 at 1.0 s and got step 1 at 1.3 s; the host was in next() from 0.9 to 1.29 s
    parts = split_idle([(1.0, 1.3)], [], [(0.9, 1.29)], offset=0.0)
    assert parts.data_s == pytest.approx(0.29)
    assert parts.other_s == pytest.approx(0.01)  # the launch after next() returned
    assert parts.copy_s == 0.0


def test_a_wait_hidden_behind_queued_gpu_work_is_not_gpu_idle_data_wait():
    # the host waited from 0.2 to 0.5 s while the GPU still ran step 0 (it ends at 0.6 s): that wait cost the
    # GPU nothing; the gap from 0.6 to 0.7 s is the host's launching and Python
    parts = split_idle([(0.6, 0.7)], [], [(0.2, 0.5)], offset=0.0)
    assert parts.data_s == 0.0 and parts.other_s == pytest.approx(0.1)


def test_a_stall_on_the_copy_stream_is_copy_wait_even_while_the_host_waits():
    # the compute stream waited for the copy from 1.1 to 1.25 s, inside a gap the host spent in next()
    parts = split_idle([(1.0, 1.3)], [(1.1, 1.25)], [(0.9, 1.3)], offset=0.0)
    assert parts.copy_s == pytest.approx(0.15)
    assert parts.data_s == pytest.approx(0.15)  # the rest of the gap, counted once
    assert parts.other_s == pytest.approx(0.0, abs=1e-12)


def test_gpu_and_host_clocks_are_matched_by_the_offset():
    # GPU times count from the epoch's first event; the host's clock reads 100 s more
    parts = split_idle([(1.0, 1.3)], [], [(100.9, 101.3)], offset=100.0)
    assert parts.data_s == pytest.approx(0.3)
    assert split_idle([(1.0, 1.3)], [], [(100.9, 101.3)], offset=None).data_s == 0.0  # no offset: cannot place it


@settings(max_examples=200, deadline=None)
@given(
    true=st.floats(-1e3, 1e3, allow_nan=False),
    events=st.lists(
        st.tuples(st.floats(0.0, 10.0, allow_nan=False), st.floats(0.0, 0.5, allow_nan=False)), min_size=1, max_size=20
    ),
)
def test_the_offset_is_exact_when_one_event_found_its_stream_idle_and_never_too_late(true, events):
    # each event: its GPU time, and how long it waited in the queue behind earlier work (0: the stream was idle)
    anchors = [(g + true - queued, g) for g, queued in events]
    assert clock_offset(anchors) <= true + 1e-9  # an event never completes before it is enqueued
    assert clock_offset([*anchors, (5.0 + true, 5.0)]) == pytest.approx(true)
    assert clock_offset([]) is None


def test_a_simulated_loop_with_a_slow_loader_is_mostly_data_wait():
    """A host loop that waits 20 ms per batch, then enqueues 5 ms of GPU work; the GPU runs each step as soon as
    it is enqueued. The split must find the waits, as the GPU saw them, from the events alone."""
    host, gpu_free, gaps, waits, anchors, prev_end = 50.0, 0.0, [], [], [], None
    for _ in range(20):
        waits.append((host, host + 0.020))
        host += 0.020 + 0.001  # the wait, then 1 ms of Python before the launch
        start = max(host, gpu_free)  # GPU clock = host clock + 0 here; the recorder sees it only through events
        anchors.append((host, start - 50.0))  # enqueue time, GPU time counted from an epoch's base event
        if prev_end is not None:
            gaps.append((prev_end - 50.0, start - 50.0))
        gpu_free = prev_end = start + 0.005
        host += 0.0005  # the launch itself returns at once: the host runs ahead
    parts = split_idle(gaps, [], waits, clock_offset(anchors))
    assert parts.idle_s == pytest.approx(19 * 0.0165)
    assert parts.data_s == pytest.approx(19 * 0.0155)  # the wait after the GPU finished its step
    assert parts.other_s == pytest.approx(19 * 0.001)  # the Python between next() and the launch
