"""Which pod and container a process runs in, read from the text of ``/proc/<pid>/cgroup``.

The kubelet gives every pod a cgroup named after its UID and the runtime gives each container a
child of it named after the container's ID; only the spelling differs. With the ``cgroupfs``
driver: ``/kubepods[/<qos>]/pod<uid>/<id>`` (CRI-O: ``crio-<id>``). With the ``systemd`` driver
a slice per pod, the UID's dashes escaped as ``_`` (``-`` separates a slice's ancestors):
``/kubepods.slice[/kubepods-<qos>.slice]/kubepods[-<qos>]-pod<uid>.slice/<runtime>-<id>.scope``
(``cri-containerd``, ``crio``, ``docker`` for cri-dockerd). kind nests it under
``/kubelet.slice/kubelet-kubepods.slice/…``, minikube's docker driver under ``/docker/<id>/``,
and a reader in its own cgroup namespace sees it relative to its own (``/../../kubepods-…``):
so the pod is found by its segment anywhere in the path, as upstream dcgm-exporter does
(``pod([a-f0-9_-]+)``), but only a real pod UID is taken.

A process of the pod outside any container's cgroup (the pod cgroup itself) has the pod's UID
and no container ID. CRI-O's ``crio-conmon-<id>.scope`` holds conmon, the runtime's monitor of
that container, not the container's own processes: it is read the same way (the pod's, no
container), tagged ``conmon``. A pod's sandbox (pause) container has a cgroup like any
container, named by the sandbox ID: nothing here tells it apart.
"""

from __future__ import annotations

import re
import uuid

from contract.records import Record

#: one line of the file: ``hierarchy-ID:controller-list:path`` (cgroup v2: ``0::path``)
_LINE = re.compile(r"^\d+:[^:]*:(?P<path>/.*)$")
#: the pod's segment: ``pod<uid>`` (cgroupfs) or ``<parents>-pod<uid with _>.slice`` (systemd)
_POD = re.compile(r"^(?:[a-z0-9_-]*-)?pod(?P<uid>[0-9a-f_-]+)(?:\.slice)?$", re.IGNORECASE)
#: a container's segment: its 64-hex ID, bare (cgroupfs) or with the runtime's prefix
_CONTAINER = re.compile(r"^(?:(?P<prefix>[a-z][a-z0-9-]*?)-)?(?P<id>[0-9a-f]{64})(?:\.scope)?$")
#: any other child of the pod's cgroup: taken as the ID a runtime gave its container
_OTHER_CHILD = re.compile(r"^(?P<id>[A-Za-z0-9][A-Za-z0-9_.:-]{0,127}?)(?:\.scope)?$")
#: a static pod's UID: the kubelet's hex hash of its manifest, not a UUID
_STATIC_UID = re.compile(r"^[0-9a-f]{32}$")
_DELETED = " (deleted)"  # cgroup v2: the process's cgroup was removed

#: the runtime each systemd scope (or CRI-O cgroupfs) prefix belongs to; no prefix: cgroupfs,
#: where containerd, cri-dockerd and docker all name a container by its bare ID
RUNTIMES = {"cri-containerd": "containerd", "crio": "cri-o", "docker": "docker", None: ""}
CONMON = "conmon"


class CgroupIdentity(Record, frozen=True):
    """The pod (UID, lower case, dashed) and container (ID as its runtime names it, ``""`` for a
    process of the pod outside any container) a process's cgroup names, and the runtime when the
    name tells it (``containerd``, ``cri-o``, ``docker``; ``conmon`` for CRI-O's monitor; ``""``
    unknown)."""

    pod_uid: str
    container_id: str = ""
    runtime: str = ""


def pod_uid(text: str) -> str | None:
    """A pod UID as the API server spells it, from its cgroup spelling; ``None`` if it is none.

    A UUID (``_`` back to ``-``, lower case), or a static pod's 32-hex UID."""
    candidate = text.replace("_", "-").lower()
    if _STATIC_UID.match(candidate):
        return candidate
    try:
        parsed = uuid.UUID(candidate)
    except ValueError:
        return None
    return candidate if str(parsed) == candidate else None


def identity_of_path(path: str) -> CgroupIdentity | None:
    """The pod and container one cgroup path names; ``None`` outside any pod's cgroup."""
    if path.endswith(_DELETED):
        path = path[: -len(_DELETED)]
    segments = [s for s in path.split("/") if s and s != ".."]
    for at in range(len(segments) - 1, -1, -1):
        found = _POD.match(segments[at])
        if found is None:
            continue
        uid = pod_uid(found["uid"])
        if uid is None:
            return None
        if at + 1 == len(segments):
            return CgroupIdentity(uid)
        return _in_pod(uid, segments[at + 1])
    return None


def _in_pod(uid: str, child: str) -> CgroupIdentity:
    container = _CONTAINER.match(child)
    if container is not None:
        prefix = container["prefix"]
        if prefix == "crio-conmon":
            return CgroupIdentity(uid, "", CONMON)
        return CgroupIdentity(uid, container["id"], RUNTIMES.get(prefix, prefix))
    other = _OTHER_CHILD.match(child)
    return CgroupIdentity(uid, other["id"] if other else "")


def identity_of(text: str) -> CgroupIdentity | None:
    """The pod and container the text of ``/proc/<pid>/cgroup`` names; ``None`` when the process
    is in no pod's cgroup, or its lines name different pods (nothing says which is right).

    cgroup v1 lists one line per hierarchy (all the same pod), v2 a single ``0::`` line, hybrid
    systems both. A line naming the container wins over one naming only the pod."""
    found: list[CgroupIdentity] = []
    for line in text.splitlines():
        parsed = _LINE.match(line.strip())
        if parsed is None:
            continue
        identity = identity_of_path(parsed["path"])
        if identity is not None:
            found.append(identity)
    if not found or len({i.pod_uid for i in found}) > 1:
        return None
    return next((i for i in found if i.container_id), found[0])
