"""Legalize each operator signature once, leaving the module per-call legalization made.

LegalizeOps runs an operator's legalization (a TE compute and
``create_prim_func``) for every call, even for a ResNet's nine identical
batch norms or a network's hundred bias adds of one shape; that was most of
stage 1's legalization time.  :func:`once_per_signature` runs it once per
signature and repeats what it did for the other calls, so the module is,
names included, the one texscope made before, when only calls of variables
were cached:

* a call of variables only calls the PrimFunc of the first such call;
* any other call (a constant bias, a scalar, a tuple of indices), which was
  legalized anew, calls the first call's PrimFunc while the builder holds it
  as it was added: the builder would return that GlobalVar for the PrimFunc
  legalized anew, which differs in parameter names only.  Where the caller
  has since only written attributes the signature determines (stage 1's
  record of the operator's attributes), the call calls it too: legalized
  anew, the PrimFunc would have got a fresh name and the same attributes,
  and :func:`texscope.convert_layout.merge_identical_prim_funcs` would have
  merged it into the first.  The fresh name is taken all the same, so the
  kernels added after keep their names.  Where anything else changed it,
  the call adds the PrimFunc again with its tensor parameters named after
  this call's variables, as ``call_te`` names them.

A legalization that is not one ``call_tir`` of the call's own arguments
through one PrimFunc it added is run for every call.

A legalization marked :func:`output_storage_blind` hands the call's
``ty_args`` (its one result type, where the plan stores the result) to
``call_te`` as they are, so its kernel is the same wherever the result
lives.  Its signature leaves out the memory scope of the result's VDevice
(its target and index stay in), and a repeat calls the first kernel with
its own ``ty_args``: an inception block's two convs of one shape, one
writing an image and one a buffer, were legalized twice for one kernel
(4.8 ms of TE and ``create_prim_func``).

After each legalization LegalizeOps gives the PrimFunc a copy carrying the
target of the VDevice the call's ``ty_args`` name, unless it has one of that
kind (its ``BindTarget``): once the module is annotated, every call.  It
adds the copy to the builder for every call, which hashes the kernel and
compares it with the copy made for the first (a 64-conv chain: 20 of the
pass's 25 ms).  A :class:`TargetBinding` does that for the first call of
each signature, so the repeated call already names the copy and
LegalizeOps leaves it alone (a repeat that adds a renamed copy still has
LegalizeOps bind it).
"""

from __future__ import annotations

import threading

import attrs
import tvm
import tvm_ffi
from tvm import relax

from ..ir.graph import CALL_TIR, Constant, new_call, new_tensor_type

# Held while BlockBuilder.add_func is patched (re-entrant: a legalization may
# legalize in turn).
_NOTING = threading.RLock()


def _argument_key(arg: relax.Expr):
    """What a legalization may read of one argument (None: more than can be
    compared, so the call is legalized on its own).

    Tensor variables by type.  Constants by type, 0-d ones by value: TVM's
    legalizations write a scalar constant into the PrimFunc (a PReLU's
    ``maximum(x, 0)``) and read no other constant's values.  Other
    expressions (shapes, tuples of indices) whole.  A variable of another
    type may be looked through to its binding (``concat`` of a tuple
    variable, ``reshape`` to a shape variable).
    """
    if isinstance(arg, relax.Var):
        return arg.ty if isinstance(arg.ty, relax.TensorType) else None
    if isinstance(arg, Constant):
        return arg if arg.ty.ndim == 0 else ("constant", arg.ty)
    return arg


def _placed_result(call: relax.Call) -> relax.TensorType | None:
    """The one result type a call's ``ty_args`` give, where it has a VDevice."""
    ty_args = call.ty_args[:]
    if len(ty_args) == 1 and isinstance(ty_args[0], relax.TensorType) \
            and ty_args[0].vdevice is not None:
        return ty_args[0]
    return None


def _result_key(call: relax.Call, storage_blind: bool) -> tuple:
    """What a legalization may read of the call's result: its type and
    ``ty_args``; for a storage-blind one, the result's type and device
    without the memory scope."""
    placed = _placed_result(call) if storage_blind else None
    if placed is None:
        return (call.ty, *call.ty_args[:])
    vdevice = placed.vdevice
    return (new_tensor_type(placed.shape, placed.dtype), vdevice.target, vdevice.vdevice_id)


def _repeated_ty_args(call: relax.Call, lowered: relax.Call, storage_blind: bool):
    """The ``ty_args`` a repeat of ``lowered`` gives ``call``: the call's own
    where the legalization hands them to ``call_te`` as they are."""
    return call.ty_args if storage_blind and _placed_result(call) is not None \
        else lowered.ty_args


def _signature(call: relax.Call, storage_blind: bool = False) -> tuple | None:
    # A slice reads an FFI array's elements without iteration's per-element
    # length and index checks.
    args = call.args[:]
    keys = [_argument_key(arg) for arg in args]
    if any(key is None for key in keys):
        return None
    # Which arguments are one variable: call_te gives each its own parameter,
    # but where they sit in the call_tir must stay the same.
    aliases = [next(j for j, other in enumerate(args) if other.same_as(arg)) for arg in args]
    return (call.attrs, *keys, *_result_key(call, storage_blind), *aliases)


def _variables_only_signature(call: relax.Call, storage_blind: bool = False) -> tuple | None:
    args = call.args[:]
    if not all(isinstance(arg, relax.Var) for arg in args):
        return None
    return (call.attrs, *(arg.ty for arg in args), *_result_key(call, storage_blind))


def output_storage_blind(legalize):
    """Mark ``legalize`` as handing the call's ``ty_args`` to ``call_te`` as
    they are (see the module docstring); returns it."""
    legalize.output_storage_blind = True
    return legalize


def _same(a: tuple, b: tuple) -> bool:
    return len(a) == len(b) and all(tvm_ffi.structural_equal(x, y) for x, y in zip(a, b))


def _plain_call_tir(lowered: relax.Expr) -> bool:
    return (isinstance(lowered, relax.Call) and isinstance(lowered.op, tvm.ir.Op)
            and lowered.op.name == CALL_TIR and len(lowered.args) == 2
            and isinstance(lowered.args[1], relax.Tuple))


def _argument_positions(call: relax.Call, lowered: relax.Call) -> list[int] | None:
    """Where each operand of the ``call_tir``, in order, sits among the call's
    arguments (None where one is not an argument: a rewritten operand)."""
    positions, start, args = [], 0, call.args[:]
    for field in lowered.args[1].fields[:]:
        found = next((i for i in range(start, len(args)) if args[i].same_as(field)), None)
        if found is None:
            return None
        positions.append(found)
        start = found + 1
    return positions


def _vdevice_target(types) -> tvm.target.Target | None:
    """The target of the first VDevice among ``types``, looking into the
    first tuple only (as LegalizeOps looks)."""
    for ty in types:
        if isinstance(ty, relax.TensorType):
            if ty.vdevice is not None and ty.vdevice.target is not None:
                return ty.vdevice.target
        elif isinstance(ty, relax.TupleType):
            return _vdevice_target(ty.fields[:])
    return None


class TargetBinding:
    """LegalizeOps' binding of legalized PrimFuncs to their call's target,
    done by :func:`once_per_signature` (see the module docstring).

    Make one per LegalizeOps run and :meth:`finish` its result: LegalizeOps
    ends with DeadCodeElimination (the PrimFuncs left without callers) and
    ConvertSSA only where it bound a PrimFunc itself.
    """

    def __init__(self):
        self.bound_any = False

    def __call__(self, bb: relax.BlockBuilder, lowered: relax.Expr) -> relax.Expr:
        """``lowered`` calling the PrimFunc's copy with the call's target, as
        LegalizeOps would make it (``lowered`` where it would leave it)."""
        if not isinstance(lowered, relax.Call) or not lowered.args:
            return lowered
        target = _vdevice_target(lowered.ty_args[:])
        gvar = lowered.args[0]
        if target is None or not isinstance(gvar, tvm.ir.GlobalVar):
            return lowered
        func = bb.get()[gvar]
        if not isinstance(func, tvm.tirx.PrimFunc):
            return lowered
        own = func.attrs.get("target") if func.attrs is not None else None
        if own is not None and own.kind.name == target.kind.name:
            return lowered
        bound = bb.add_func(func.with_attr("target", target),
                            f"{gvar.name_hint}_{target.kind.name}")
        self.bound_any = True
        return new_call(lowered.op, [bound, *lowered.args[1:]], lowered.attrs,
                        lowered.ty_args)

    def finish(self, mod: tvm.IRModule) -> tvm.IRModule:
        """What LegalizeOps does last after binding a PrimFunc."""
        if not self.bound_any:
            return mod
        return tvm.tirx.transform.ConvertSSA()(relax.transform.DeadCodeElimination()(mod))


@attrs.frozen
class _Legalized:
    """One legalization to repeat: the ``call_tir`` it returned (calling the
    PrimFunc's copy bound to its target, where a :class:`TargetBinding` made
    one), where its operands come from, the PrimFunc it added with its
    GlobalVar and the name hint it gave, and the attributes a caller may
    write on that PrimFunc which the signature determines."""

    lowered: relax.Call
    positions: tuple[int, ...]
    prim_func: tvm.tirx.PrimFunc
    added: tvm.ir.GlobalVar
    name_hint: str
    signature_attrs: tuple[str, ...] = ()

    def repeat(self, bb: relax.BlockBuilder, call: relax.Call,
               storage_blind: bool = False) -> relax.Call:
        operands = [call.args[i] for i in self.positions]
        current = bb.get()[self.added]
        if current.same_as(self.prim_func):
            # The first call's PrimFunc is still there as added: the builder
            # would return its GlobalVar for this copy, which differs in
            # parameter names only, after renaming and hashing the kernel;
            # LegalizeOps would then bind the call to the first one's
            # bound copy.
            gvar = self.lowered.args[0]
        elif _differs_only_in(current, self.prim_func, self.signature_attrs):
            # The caller has since written attributes the signature
            # determines: the copy would get the same ones and be merged
            # into the first.  Its name is still taken, so the kernels
            # legalized after it keep theirs.
            bb.get_unique_name(self.name_hint)
            gvar = self.lowered.args[0]
        else:
            gvar = bb.add_func(_named_after(self.prim_func, operands), self.name_hint)
        return new_call(self.lowered.op, [gvar, relax.Tuple(operands)], self.lowered.attrs,
                        _repeated_ty_args(call, self.lowered, storage_blind))


def _differs_only_in(current, added: tvm.tirx.PrimFunc, keys: tuple[str, ...]) -> bool:
    """Whether ``current`` is ``added`` (its very body and parameters) but
    for attributes named in ``keys``."""
    if not keys or not (isinstance(current, tvm.tirx.PrimFunc)
                        and current.body.same_as(added.body)
                        and current.params.same_as(added.params)):
        return False

    def others(func):
        return {k: v for k, v in (func.attrs.items() if func.attrs is not None else ())
                if k not in keys}

    return tvm_ffi.structural_equal(others(current), others(added))


def _named_after(func: tvm.tirx.PrimFunc, operands: list[relax.Expr]) -> tvm.tirx.PrimFunc:
    """``func`` with the parameter of each variable operand named after it."""
    renamed = {
        param: tvm.ir.Var(operand.name, param.ty)
        for param, operand in zip(func.params, operands)
        if isinstance(operand, relax.Var) and param.name != operand.name
    }
    if not renamed:
        return func
    return tvm_ffi.structural_map(func, (tvm.ir.Var, lambda var: renamed.get(var, var)))


def _named_as_call_te_names(func, operands: list[relax.Expr]) -> bool:
    """Whether ``func``'s parameters are named after the variable operands,
    as ``call_te`` names them (so :func:`_named_after` repeats it exactly)."""
    return len(func.params) >= len(operands) and all(
        param.name == operand.name
        for param, operand in zip(func.params, operands) if isinstance(operand, relax.Var))


def _legalize_noting_added(legalize, bb: relax.BlockBuilder, call: relax.Call):
    """``legalize(bb, call)``, and the (PrimFunc, name hint, GlobalVar) of each
    function it added to ``bb``."""
    added = []

    def noting(builder, func, name_hint):
        gvar = add_func(builder, func, name_hint)
        if builder.same_as(bb):
            added.append((func, name_hint, gvar))
        return gvar

    # TVM's legalizations are FFI functions: the BlockBuilder they get is
    # another Python object for the same builder, so only the class sees
    # their call_te add its PrimFunc.  One thread at a time patches it (a
    # second one would restore the first one's patch).
    with _NOTING:
        add_func = relax.BlockBuilder.add_func
        relax.BlockBuilder.add_func = noting
        try:
            return legalize(bb, call), added
        finally:
            relax.BlockBuilder.add_func = add_func


def _repeatable(call: relax.Call, lowered: relax.Expr, added: list,
                signature_attrs: tuple[str, ...]) -> _Legalized | None:
    if not _plain_call_tir(lowered) or len(added) != 1:
        return None
    func, name_hint, gvar = added[0]
    positions = _argument_positions(call, lowered)
    if positions is None or not gvar.same_as(lowered.args[0]) \
            or not isinstance(func, tvm.tirx.PrimFunc) \
            or not _named_as_call_te_names(func, lowered.args[1].fields[:]):
        return None
    return _Legalized(lowered, tuple(positions), func, gvar, name_hint, signature_attrs)


class _Seen:
    """Signatures seen, bucketed by structural hash."""

    def __init__(self):
        self._buckets: dict[int, list[tuple[tuple, object]]] = {}

    def find(self, signature: tuple):
        bucket = self._buckets.get(tvm_ffi.structural_hash(signature), [])
        return next((done for known, done in bucket if _same(known, signature)), None)

    def add(self, signature: tuple, done) -> None:
        self._buckets.setdefault(tvm_ffi.structural_hash(signature), []).append((signature, done))


def once_per_signature(legalize, binding: TargetBinding | None = None,
                       signature_attrs: tuple[str, ...] = ()):
    """``legalize`` run once per distinct signature, repeated for the other
    calls with it (see the module docstring).

    The signature is the operator's attributes, each argument's type (a 0-d
    constant's value; shapes and tuples whole), which arguments are one
    variable, the result type and ``ty_args``.  Make one per LegalizeOps run:
    what it keeps belongs to one BlockBuilder.  ``binding``, where given,
    binds the first legalization of each signature to its target.
    ``signature_attrs`` names the attributes the caller writes on a
    legalized PrimFunc that the signature determines (stage 1's operator
    record): a PrimFunc changed in those only is still the one to repeat.
    A ``legalize`` marked :func:`output_storage_blind` is repeated for calls
    whose results are stored elsewhere too.
    """
    variables_only, with_others = _Seen(), _Seen()
    blind = getattr(legalize, "output_storage_blind", False)

    def run(bb: relax.BlockBuilder, call: relax.Call) -> relax.Expr:
        plain = _variables_only_signature(call, blind)
        if plain is not None:
            lowered = variables_only.find(plain)
            if lowered is not None:
                return new_call(lowered.op, [lowered.args[0], relax.Tuple(call.args[:])],
                                lowered.attrs, _repeated_ty_args(call, lowered, blind))
            lowered = legalize(bb, call)
            if _plain_call_tir(lowered) and _argument_positions(call, lowered) \
                    == list(range(len(call.args))):
                if binding is not None:
                    lowered = binding(bb, lowered)
                variables_only.add(plain, lowered)
            return lowered
        signature = _signature(call, blind)
        if signature is None:
            return legalize(bb, call)
        done = with_others.find(signature)
        if done is not None:
            return done.repeat(bb, call, blind)
        lowered, added = _legalize_noting_added(legalize, bb, call)
        done = _repeatable(call, lowered, added, signature_attrs)
        if done is not None:
            if binding is not None:
                lowered = binding(bb, lowered)
                done = attrs.evolve(done, lowered=lowered)
            with_others.add(signature, done)
        return lowered

    return run
