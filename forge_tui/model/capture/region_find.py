"""Finding a forward's fusion regions: record its graph, partition it, group repeated instances,
then name each region's pattern and say whether it can become a task.

The regions themselves (what a region is, how the graph is partitioned, its times) are
:mod:`forge_tui.model.capture.regions`; patterns :mod:`~forge_tui.model.capture.patterns`;
whether a region can become a task :mod:`~forge_tui.model.capture.region_task`.
"""

from __future__ import annotations

import re
from typing import Optional

from forge_tui.model.capture.graph import Graph, module_of, record_graph
from forge_tui.model.capture.model_file import run_forward
from forge_tui.model.capture.patterns import match
from forge_tui.model.capture.recorder import Capture
from forge_tui.model.capture.region_task import refusal
from forge_tui.model.capture.regions import Instance, Region, RegionSet, kernels_of, partition, set_times, signature
from forge_tui.model.errors import CaptureError


def find_regions(cap: Capture, graph: Optional[Graph] = None) -> RegionSet:
    """The fusion regions of a capture's forward (see the module docstring).

    Runs the capture's model once more under :class:`GraphRecorder` (unless ``graph`` is
    given), groups repeated instances, takes each region's time from the capture's op groups
    (when :func:`measure` ran), matches named patterns and checks each region can become a
    task: its replay on the recorded values must reproduce the forward's value
    (:func:`forge_tui.model.capture.region_task.refusal`).

    Raises:
        CaptureError: the forward raised.
    """
    if cap.model is None:
        raise CaptureError(f"the capture of {cap.model_file.path.name} holds no model to trace")
    if graph is None:
        graph = record_graph(
            cap.model, cap.inputs, lambda mode: run_forward(cap.model_file, cap.model, cap.inputs, mode)
        )
    by_sig: dict[str, list[Instance]] = {}
    singles = 0
    for inst in partition(graph):
        if kernels_of(graph, inst) < 2:
            singles += 1
            continue
        by_sig.setdefault(signature(graph, inst), []).append(inst)
    regions = []
    for k, insts in enumerate(by_sig.values(), start=1):
        first = insts[0]
        nodes = [graph.nodes[i] for i in first.nodes]
        r = Region(f"R{k}", insts, graph, ops=[n.op for n in nodes], kernels=kernels_of(graph, first))
        r.module = _modules(graph, insts)
        regions.append(r)
    _link(graph, regions)
    for r in regions:
        r.pattern = match(graph, r.first)
        r.refusal = refusal(r)
    rs = RegionSet(cap, graph, regions, singles)
    set_times(rs)
    return rs


def _modules(graph: Graph, insts: list[Instance]) -> Optional[str]:
    """Where the instances ran, layer numbers folded: ``layers.*.input_layernorm``, with
    ``(+N)`` when they ran in N more kinds of module (``post_attention_layernorm``)."""
    seen: list[str] = []
    for inst in insts:
        m = module_of([graph.nodes[i] for i in inst.nodes])
        if m is not None:
            m = re.sub(r"(?<=\.)\d+(?=\.|$)|^\d+(?=\.)", "*", m) if len(insts) > 1 else m
            if m not in seen:
                seen.append(m)
    if not seen:
        return None
    return seen[0] + (f" (+{len(seen) - 1})" if len(seen) > 1 else "")


def _link(graph: Graph, regions: list[Region]) -> None:
    """Set each region's ``feeds``: the regions whose instances read one of its outputs."""
    for r in regions:
        outs = {ref for inst in r.instances for ref in inst.live}
        fed = []
        for other in regions:
            if other is r:
                continue
            for inst in other.instances:
                read = any(ref in graph.nodes[n].reads for n in inst.nodes for ref in outs)
                if read and other.id not in fed:
                    fed.append(other.id)
        r.feeds = fed
