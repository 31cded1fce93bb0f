"""What was decided for every tensor, and why, as data people and tools read."""

from __future__ import annotations

import json
from collections import Counter

import attrs

from ..collect_producer import ProducerInfo
from ..knowledge.targets import describe_flavour, is_texture_scope


@attrs.frozen
class TensorRow:
    function: str
    index: int  # names need not be unique in Relax; indices are
    name: str
    origin: str
    shape: tuple | None
    dtype: str
    nbytes: int
    scope: str
    reason: str
    consumers: tuple[str, ...]


@attrs.frozen
class CopyRow:
    function: str
    tensor: str
    source: str
    destination: str
    nbytes: int
    readers: tuple[str, ...]


@attrs.frozen
class EdgeRow:
    """A kernel reading tensor ``source`` to write tensor ``target`` (indices
    into the function's tensors); ``copied`` when it reads a copy."""

    function: str
    source: int
    target: int
    kernel: str
    copied: bool


@attrs.frozen
class KernelRow:
    """A kernel a tuning file priced: the measured time of the storages
    chosen and of the alternatives (``"in=texture, out=buffer"``: seconds)."""

    function: str
    kernel: str
    call: str
    chosen: str
    seconds: float
    alternatives: dict


@attrs.frozen
class VerdictRow:
    """Whether a function's measured optimum was kept against the simple
    plans (:class:`texscope.planner.tuned.Verdict`): ``kept`` (``"tuned"``,
    ``"all-buffer"`` or ``"all-texture"``) and the reason, in words."""

    function: str
    kept: str
    reason: str
    tuned_s: float
    extremes: dict
    margin_s: float
    margin_source: str


@attrs.frozen
class Report:
    """Per tensor: shape, dtype, scope and reason; the copies planned; totals.

    ``build`` holds figures of the build (kernels, copies left after fusion,
    stage times) when the report comes from :func:`texscope.build`.
    """

    target: str
    tensors: tuple[TensorRow, ...]
    copies: tuple[CopyRow, ...]
    build: dict = attrs.field(factory=dict)
    edges: tuple[EdgeRow, ...] = ()
    kernels: tuple[KernelRow, ...] = ()
    # Calls no tuned kernel covered (priced by the cost profile), per function.
    untuned: tuple[str, ...] = ()
    model: str = ""  # what the user built (the file's name), for titles
    # Per function, the tuned plan against all-buffer and all-texture.
    verdicts: tuple[VerdictRow, ...] = ()

    @property
    def title(self) -> str:
        """The model where known, then the target it was built for."""
        target = self.target if len(str(self.target)) <= 40 else "a target given as JSON"
        return f"{self.model} for {target}" if self.model else str(target)

    @classmethod
    def from_plans(cls, target: str, plans: dict[str, ProducerInfo], build=None) -> "Report":
        tensors, copies, edges, kernels, untuned, verdicts = [], [], [], [], [], []
        for function, plan in sorted(plans.items()):
            graph = plan.graph
            verdict = getattr(plan.tuned, "verdict", None)
            if verdict is not None:
                verdicts.append(VerdictRow(function, verdict.kept, verdict.reason,
                                           verdict.tuned_s, dict(verdict.extremes),
                                           verdict.margin_s, verdict.margin_source))
            if plan.tuned is not None:
                kernels += [KernelRow(function, k.kernel, k.call, ", ".join(k.chosen), k.seconds,
                                      {", ".join(a): sec for a, sec in k.alternatives})
                            for k in plan.tuned.kernels]
                untuned += [f"{function}/{name}" for name in plan.tuned.uncovered]
            for site in graph.calls:
                for operand, source in enumerate(site.operands):
                    if source is None:
                        continue
                    copied = plan.reads[site.index][operand] != plan.choices[source].scope
                    for written in site.outputs:
                        edges.append(EdgeRow(function, source, written, site.support.name, copied))
            for tensor, choice, demands in zip(plan.graph.tensors, plan.choices,
                                               plan.consumers.demands):
                tensors.append(TensorRow(
                    function, tensor.index, tensor.name, tensor.origin, tensor.shape, tensor.dtype,
                    tensor.nbytes, choice.scope, choice.reason,
                    tuple(f"{d.consumer} ({d.entry}: {'/'.join(sorted(s.value for s in d.accepts))})"
                          for d in demands),
                ))
                for destination in choice.copied_to:
                    copies.append(CopyRow(function, tensor.name, choice.scope, destination,
                                          tensor.nbytes, choice.copied_for))
        return cls(target, tuple(tensors), tuple(copies), dict(build or {}), tuple(edges),
                   tuple(kernels), tuple(untuned), verdicts=tuple(verdicts))

    def counts(self) -> dict[str, int]:
        """Tensors per memory scope."""
        return dict(sorted(Counter(row.scope for row in self.tensors).items()))

    def summary(self) -> dict:
        textures = sum(n for scope, n in self.counts().items() if is_texture_scope(scope))
        return {
            **({"model": self.model} if self.model else {}),
            "target": self.target,
            "tensors": len(self.tensors),
            "in_texture": textures,
            "in_buffer": len(self.tensors) - textures,
            "planned_copies": len(self.copies),
            "planned_copy_bytes": sum(c.nbytes for c in self.copies),
            **self.build,
        }

    def to_json(self) -> str:
        return json.dumps(
            {"summary": self.summary(), "scopes": self.counts(),
             "tensors": [attrs.asdict(t) for t in self.tensors],
             "copies": [attrs.asdict(c) for c in self.copies],
             "edges": [attrs.asdict(e) for e in self.edges],
             **({"kernels": [attrs.asdict(k) for k in self.kernels],
                 "untuned": list(self.untuned)} if self.kernels or self.untuned else {}),
             **({"tuned_plans": [attrs.asdict(v) for v in self.verdicts]}
                if self.verdicts else {})},
            indent=2,
        )

    @classmethod
    def from_json(cls, text: str) -> "Report":
        """The report :meth:`to_json` wrote (``texscope explain`` of a build
        directory)."""
        data = json.loads(text)
        summary = dict(data["summary"])
        model, target = summary.pop("model", ""), summary.pop("target")
        for key in ("tensors", "in_texture", "in_buffer", "planned_copies", "planned_copy_bytes"):
            summary.pop(key, None)
        tensors = tuple(TensorRow(**{**t, "shape": tuple(t["shape"]) if t["shape"] else None,
                                     "consumers": tuple(t["consumers"])})
                        for t in data["tensors"])
        copies = tuple(CopyRow(**{**c, "readers": tuple(c["readers"])}) for c in data["copies"])
        edges = tuple(EdgeRow(**e) for e in data.get("edges", ()))
        kernels = tuple(KernelRow(**k) for k in data.get("kernels", ()))
        verdicts = tuple(VerdictRow(**v) for v in data.get("tuned_plans", ()))
        return cls(target, tensors, copies, summary, edges, kernels=kernels,
                   untuned=tuple(data.get("untuned", ())), model=model, verdicts=verdicts)

    def to_markdown(self) -> str:
        lines = [f"# texscope report: {self.title}", ""]
        lines += [f"- {k.replace('_', ' ')}: {v}" for k, v in self.summary().items()]
        lines += ["", "## Tensors per scope", ""]
        lines += [f"- `{scope}`: {n}" for scope, n in self.counts().items()]
        lines += ["", "What the texture scopes (flavours) mean:", ""]
        lines += [f"- {describe_flavour(scope)}" for scope in self.counts() if is_texture_scope(scope)]
        lines += ["", "## Tensors", "",
                  "| function | tensor | shape | dtype | bytes | scope | reason |",
                  "|---|---|---|---|---|---|---|"]
        for t in self.tensors:
            shape = "x".join(map(str, t.shape)) if t.shape else "symbolic"
            lines.append(f"| {t.function} | {t.name} | {shape} | {t.dtype} | {t.nbytes} | "
                         f"`{t.scope}` | {t.reason} |")
        lines += ["", "## Copies", ""]
        if not self.copies:
            lines.append("None.")
        for c in self.copies:
            lines.append(f"- {c.function}/{c.tensor}: `{c.source}` -> `{c.destination}`, "
                         f"{c.nbytes} bytes, for {', '.join(c.readers)}")
        lines += self.kernel_lines()
        return "\n".join(lines) + "\n"

    def kernel_lines(self) -> list[str]:
        """The measured kernels' section (empty without a tuning file)."""
        if not self.kernels and not self.untuned and not self.verdicts:
            return []
        lines = ["", "## Kernels, measured (tuning file)", "",
                 "| function | kernel | call | chosen | time | alternatives |", "|---|---|---|---|---|---|"]
        for k in self.kernels:
            others = "; ".join(f"{a}: {sec * 1e6:.1f} us" for a, sec in k.alternatives.items())
            lines.append(f"| {k.function} | {k.kernel} | {k.call} | {k.chosen} | "
                         f"{k.seconds * 1e6:.1f} us | {others or '-'} |")
        lines += ["", "Priced by the cost profile (not in the tuning file): "
                  + (", ".join(self.untuned) if self.untuned else "none.")]
        if self.verdicts:
            lines += ["", "Against the simple plans (the tuned plan is kept only where it beats "
                      "the plan to beat by more than the margin: all-buffer, or all-texture or "
                      "a plan run whole, the default or an earlier round's, where that one beats "
                      "all-buffer by its own margin):", ""]
            lines += [f"- {v.function}: {v.reason}" for v in self.verdicts]
        return lines
