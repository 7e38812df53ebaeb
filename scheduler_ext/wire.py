"""The kube-scheduler extender v1 wire types, decoded with msgspec.

Design: docs/architecture.md#extender-protocol.

The Go types (k8s.io/kube-scheduler/extender/v1) carry no json tags, so the keys are the Go field
names: ``Pod``, ``Nodes``, ``NodeNames``, ``FailedNodes`` ... Requests always carry both ``Nodes``
and ``NodeNames``, one of them ``null``. Only the fields the decisions need are declared: msgspec
skips everything else without building Python objects, which matters because a ``v1.NodeList`` of a
few hundred nodes is megabytes. Full Node objects are never decoded: a second pass keeps each item
as ``msgspec.Raw`` so that the filter reply carries the passing subset of the very same bytes.

Neighbours: ``decisions`` consumes the decoded facts, ``http_server`` does the I/O.
"""

from __future__ import annotations

import msgspec

# A request body as the HTTP layer hands it over (read into one growing buffer, not copied).
Body = bytes | bytearray

# Structs made by the thousand per request (one per node) are not tracked by the garbage collector
# (``gc=False``): they hold only strings and numbers, so they cannot form cycles, and tracking
# them would trigger collections on every large request.

# -- request side: the parts of a v1.Pod the decisions look at ---------------------------------


class OwnerReference(msgspec.Struct, gc=False):
    kind: str = ""
    name: str = ""
    controller: bool | None = None
    uid: str = ""


class ObjectMeta(msgspec.Struct):
    name: str = ""
    namespace: str = ""
    uid: str = ""
    resourceVersion: str = ""
    annotations: dict[str, str] | None = None
    labels: dict[str, str] | None = None
    ownerReferences: list[OwnerReference] | None = None


# A quantity is a string in the API's JSON ("100m"); a number is accepted too.
Quantities = dict[str, str | int | float]


class ResourceRequirements(msgspec.Struct, gc=False):
    requests: Quantities | None = None
    limits: Quantities | None = None


class Container(msgspec.Struct, gc=False):
    """The parts of a container the workload class and the requests are made of."""

    resources: ResourceRequirements | None = None
    restartPolicy: str | None = None  # "Always" on an init container: a sidecar


class PodSpec(msgspec.Struct):
    priorityClassName: str | None = None
    nodeName: str | None = None
    schedulerName: str | None = None
    containers: list[Container] | None = None
    initContainers: list[Container] | None = None
    overhead: Quantities | None = None


class Pod(msgspec.Struct):
    metadata: ObjectMeta | None = None
    spec: PodSpec | None = None


class NodeMeta(msgspec.Struct, gc=False):
    name: str = ""


class NodeNameOnly(msgspec.Struct, gc=False):
    metadata: NodeMeta | None = None


class NodeListNames(msgspec.Struct):
    """A v1.NodeList decoded down to its items' names."""

    items: list[NodeNameOnly] | None = None


class NodeListRaw(msgspec.Struct):
    """A v1.NodeList whose items stay undecoded bytes (for passing them back verbatim)."""

    items: list[msgspec.Raw] | None = None


class ExtenderArgs(msgspec.Struct):
    """Filter and prioritize request: ``Nodes`` when not nodeCacheCapable, else ``NodeNames``."""

    Pod: Pod | None = None
    Nodes: NodeListNames | None = None
    NodeNames: list[str] | None = None


class ExtenderArgsRawNames(msgspec.Struct):
    """``ExtenderArgs`` with ``Pod`` and ``NodeNames`` left undecoded: the decider keeps recently
    seen candidate lists by their bytes, so a repeated list is neither decoded nor resolved again,
    and the service keeps recent pods' facts by the Pod's bytes, since kube-scheduler sends the
    same Pod to filter and then to prioritize."""

    Pod: msgspec.Raw = msgspec.Raw(b"null")
    Nodes: NodeListNames | None = None
    NodeNames: msgspec.Raw = msgspec.Raw(b"null")


class NodesRawOnly(msgspec.Struct):
    Nodes: NodeListRaw | None = None


class NodesWhole(msgspec.Struct):
    """The ``Nodes`` value kept as raw bytes: echoed back when every node passes."""

    Nodes: msgspec.Raw


class ExtenderBindingArgs(msgspec.Struct):
    PodName: str = ""
    PodNamespace: str = ""
    PodUID: str = ""
    Node: str = ""


class VictimPod(msgspec.Struct):
    metadata: ObjectMeta | None = None


class Victims(msgspec.Struct):
    Pods: list[VictimPod | None] | None = None
    NumPDBViolations: int = 0


class MetaPod(msgspec.Struct, gc=False):
    UID: str = ""


class MetaVictims(msgspec.Struct):
    Pods: list[MetaPod | None] | None = None
    NumPDBViolations: int = 0


class ExtenderPreemptionArgs(msgspec.Struct):
    Pod: Pod | None = None
    NodeNameToVictims: dict[str, Victims | None] | None = None
    NodeNameToMetaVictims: dict[str, MetaVictims | None] | None = None


# -- reply side --------------------------------------------------------------------------------


class FilterResultNames(msgspec.Struct):
    """Filter reply in nodeCacheCapable mode (``Nodes`` is null)."""

    NodeNames: list[str]
    FailedNodes: dict[str, str]
    FailedAndUnresolvableNodes: dict[str, str]
    Error: str = ""
    Nodes: None = None


class RawNodeList(msgspec.Struct):
    items: list[msgspec.Raw]
    apiVersion: str = "v1"
    kind: str = "NodeList"


class FilterResultNodes(msgspec.Struct):
    """Filter reply with full Node objects (``NodeNames`` is null)."""

    Nodes: RawNodeList | msgspec.Raw
    FailedNodes: dict[str, str]
    FailedAndUnresolvableNodes: dict[str, str]
    Error: str = ""
    NodeNames: None = None


class HostPriority(msgspec.Struct, gc=False):
    Host: str
    Score: int


class BindingResult(msgspec.Struct):
    Error: str = ""


class PreemptionResult(msgspec.Struct):
    NodeNameToMetaVictims: dict[str, MetaVictims]


# Decoders and the encoder are built once: msgspec caches the type plans inside them.
decode_args = msgspec.json.Decoder(ExtenderArgs).decode
decode_args_raw_names = msgspec.json.Decoder(ExtenderArgsRawNames).decode
decode_names = msgspec.json.Decoder(list[str] | None).decode
decode_pod = msgspec.json.Decoder(Pod | None).decode
decode_nodes_raw = msgspec.json.Decoder(NodesRawOnly).decode
decode_nodes_whole = msgspec.json.Decoder(NodesWhole).decode
decode_binding = msgspec.json.Decoder(ExtenderBindingArgs).decode
decode_preemption = msgspec.json.Decoder(ExtenderPreemptionArgs).decode
encode = msgspec.json.Encoder().encode

DecodeError = msgspec.DecodeError
ValidationError = msgspec.ValidationError
