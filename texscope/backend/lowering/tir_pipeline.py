"""TVM's Adreno TIR lowering, with its texel stores retyped, kernel
buffers compacted unguarded and ``if_then_else`` conditions hidden where no
pass needs them.

The passes are those of TVM 0.27's Adreno pipeline
(``tvm.s_tir.backend.adreno.pipeline``), in its order and under the same
``PassContext`` options, but for :data:`RetypeTextureStore` right after
``TextureFlatten``, ``CompactBufferAllocation``, which is
:data:`CompactUnguarded` here, ``HoistIfThenElse``, which runs on kernels
with an ``if`` statement only (:data:`HoistIfThenElseWhereAny`), and
:data:`HideConditions` / :data:`ShowConditions` around two stretches.

TVM 0.27 writes wrong texels: TextureFlatten types each ``texture2d_store``
call with the image's pointer type, VectorizeLoop then takes the call for a
non-primitive one and scalarizes the 4-lane loop around it, and every lane
stores one broadcast value.  ``RetypeTextureStore`` gives the store a
primitive type, so the lanes are packed into one ``write_imagef`` (found by
running the kernels on PoCL).

Conditions are hidden (:mod:`texscope.tvm_workarounds.hidden_conditions`) from the
start to the int64 narrowing, which may bound an index by one, and from
vectorization, which has its own handling of ``if_then_else``, to the end of
the clean-up (simplification, no-op removal, common subexpressions); the
device's last simplification, after the host/device split, sees them all
again.  Kernels allocating shared memory keep theirs (the thread
synchronization and compaction of what threads share read them), as does
every kernel where ``if_then_else`` expressions are to be hoisted, bound
checks instrumented or loads made PTX ``ldg32`` (the passes doing so read
them).  On every kernel of the zoo and of the MediaPipe
models the OpenCL source is the one TVM's passes write with conditions in
sight (a test compares them); the TIR before that last simplification may
still hold a nested ``if_then_else`` it merges.  Inception's build took 13%
less CPU time, mobilenet_v2's and unet's 5 to 6%.

TVM's pass narrows each buffer's accessed region by the predicates of the
blocks accessing it (the guards of non-dividing splits) and by the
condition of every ``if_then_else`` around an access.  On a scheduled conv
that analysis is most of the pass: 2 to 10 ms a kernel, about as long as
scheduling it.  A kernel allocating registers (``local``) and global scratch
only is compacted here with its predicates set aside and put back after
(and its conditions hidden).  Without them a region can only be wider, so a
buffer never comes out too small; on every kernel of the zoo and of the
MediaPipe models it comes out the size TVM makes it (a test compares them).
Kernels with shared memory, where a guard on the threads may bound what a
block shares, keep TVM's pass; kernels allocating nothing skip it (it would
return them unchanged).

``HoistIfThenElse`` moves ``if`` statements out of loops that do not change
their condition, then simplifies the kernel and removes no-ops again.  A
kernel with no ``if`` statement (layout transforms, pools, kernels whose
threads divide their work) has nothing to hoist, and what the pass's
simplification and clean-up leave is simplified and cleaned up again four
passes later: on every kernel of the zoo and of the MediaPipe models the
lowered kernel is the same with the pass or without it (a test compares
them).  That pass was 6.0 ms of the 22.7 ms lowering inception's max pool,
1.3 of 10.9 ms of a layout transform's.
"""

from __future__ import annotations

import tvm
import tvm_ffi
from tvm import s_tir, tirx

from ...ir.tir import allocated_scopes, has_if_statement
from ...tvm_workarounds.hidden_conditions import conditions_hidden, conditions_shown

_COMPACT = s_tir.transform.CompactBufferAllocation()
_TEXTURE_STORE = tvm.ir.Op.get("tirx.texture2d_store")


def _primitive_store(call):
    if call.op.same_as(_TEXTURE_STORE) and not isinstance(call.ty, tvm.ir.PrimType):
        return tvm.ir.Call(call.op, call.args[:], call.attrs, span=call.span,
                           ret_ty=tvm.ir.PrimType("int32"))
    return call


@tirx.transform.prim_func_pass(opt_level=0, name="texscope.RetypeTextureStore")
def RetypeTextureStore(func, _mod, _ctx):  # pylint: disable=invalid-name
    """Give ``texture2d_store`` calls a primitive type (see the module docstring)."""
    return tvm_ffi.structural_map(func, (tvm.ir.Call, _primitive_store))


def _predicates_set_aside(func: tirx.PrimFunc) -> tuple[tirx.PrimFunc, dict] | None:
    """``func`` with every block predicate ``True``, and the predicates by
    block name; None where two guarded blocks share a name."""
    predicates: dict = {}
    clash = []

    def unguard(realize):
        if isinstance(realize.predicate, tirx.IntImm) and int(realize.predicate) == 1:
            return realize
        name = realize.block.name_hint
        if name in predicates:
            clash.append(name)
        predicates[name] = realize.predicate
        return s_tir.SBlockRealize(realize.iter_values, tirx.const(True, "bool"), realize.block)

    stripped = tvm_ffi.structural_map(func, (s_tir.SBlockRealize, unguard))
    return None if clash else (stripped, predicates)


def _predicates_restored(func: tirx.PrimFunc, predicates: dict) -> tirx.PrimFunc:
    def guard(realize):
        predicate = predicates.get(realize.block.name_hint)
        if predicate is None:
            return realize
        return s_tir.SBlockRealize(realize.iter_values, predicate, realize.block)

    return tvm_ffi.structural_map(func, (s_tir.SBlockRealize, guard))


def _compacted(func: tirx.PrimFunc) -> tirx.PrimFunc:
    scopes = allocated_scopes(func.body)
    if not scopes:
        # The pass resizes allocated buffers only; its analysis of every
        # access still costs up to 3 ms a kernel (a pool's window).
        return func
    if scopes - {"local", "global"}:
        return _COMPACT(tvm.IRModule({"main": func}))["main"]
    unguarded = _predicates_set_aside(func)
    if unguarded is None:
        return _COMPACT(tvm.IRModule({"main": func}))["main"]
    stripped, predicates = unguarded
    return _predicates_restored(_COMPACT(tvm.IRModule({"main": stripped}))["main"], predicates)


@tvm.transform.module_pass(opt_level=0, name="texscope.CompactUnguarded")
def CompactUnguarded(mod: tvm.IRModule, _ctx) -> tvm.IRModule:  # pylint: disable=invalid-name
    """``CompactBufferAllocation``, kernels without shared memory compacted
    without their block predicates (and their if_then_else conditions
    hidden: see the module docstring)."""
    functions = {gvar: _compacted(func) if isinstance(func, tirx.PrimFunc) else func
                 for gvar, func in mod.functions.items()}
    return tvm.IRModule(functions, attrs=mod.attrs, global_infos=mod.global_infos)


_HOIST = s_tir.transform.HoistIfThenElse()


def _hoists_more_than_statements(func: tirx.PrimFunc) -> bool:
    """Whether TVM's hoister would also hoist conditions on block variables or
    ``if_then_else`` expressions (a pass option, a function attribute)."""
    config = tvm.transform.PassContext.current().config.get("s_tir.HoistIfThenElse")
    flag = func.attrs.get("tirx.HoistIfThenElseExprWithBlock") if func.attrs is not None else None
    return bool(config is not None and config.support_block_scope_hoisting) or \
        (flag is not None and int(flag) == 1)


@tirx.transform.prim_func_pass(opt_level=0, name="texscope.HoistIfThenElseWhereAny")
def HoistIfThenElseWhereAny(func, _mod, _ctx):  # pylint: disable=invalid-name
    """TVM's ``HoistIfThenElse`` for a kernel with an ``if`` statement (see the
    module docstring); any other is left as it is."""
    if not has_if_statement(func.body) and not _hoists_more_than_statements(func):
        return func
    return _HOIST(tvm.IRModule({"main": func}))["main"]


def _option(name: str) -> bool:
    return bool(tvm.transform.PassContext.current().config.get(name, False))


def _keeps_conditions(func: tirx.PrimFunc) -> bool:
    """Whether a pass between the hiding points may need ``func``'s
    ``if_then_else`` conditions (see the module docstring)."""
    return (bool(allocated_scopes(func.body) - {"local", "global"})
            or _hoists_more_than_statements(func)
            or _option("tirx.instrument_bound_checkers")
            or _option("tirx.s_tir.ldg32"))


@tirx.transform.prim_func_pass(opt_level=0, name="texscope.HideConditions")
def HideConditions(func, _mod, _ctx):  # pylint: disable=invalid-name
    """Hide ``func``'s ``if_then_else`` conditions from the passes that follow
    (:mod:`texscope.tvm_workarounds.hidden_conditions`), unless it keeps them."""
    return func if _keeps_conditions(func) else conditions_hidden(func)


@tirx.transform.prim_func_pass(opt_level=0, name="texscope.ShowConditions")
def ShowConditions(func, _mod, _ctx):  # pylint: disable=invalid-name
    """Show every hidden ``if_then_else`` condition again."""
    return conditions_shown(func)


def adreno_tir_passes() -> list:
    """TVM's Adreno TIR pipeline as a list, under the current PassContext's
    options, :data:`RetypeTextureStore` after ``TextureFlatten``,
    :data:`CompactUnguarded` and :data:`HoistIfThenElseWhereAny` in place of
    TVM's compaction and hoisting, and conditions hidden over two stretches
    (:data:`HideConditions` to :data:`ShowConditions`)."""
    passes = [
        HideConditions,
        s_tir.backend.adreno.transform.TextureFlatten(),
        RetypeTextureStore,
        s_tir.transform.CanonicalizeLoop(),
        s_tir.transform.LowerCrossThreadReduction(),
        s_tir.transform.LowerInitBlock(),
        s_tir.transform.PlanAndUpdateBufferAllocationLocation(),
        s_tir.transform.ConvertBlocksToOpaque(),
        s_tir.transform.LiftThreadBinding(),
        s_tir.transform.ManifestSharedMemoryLocalStage(),
        CompactUnguarded,
        s_tir.transform.LowerAutoCopy(),
        s_tir.transform.UnifyThreadBinding(),
        s_tir.transform.LowerMatchBuffer(),
        s_tir.transform.StmtSimplify(),
        s_tir.transform.InjectPermutedLayout(),
        s_tir.transform.AnnotateIrregularLoop(),
        s_tir.transform.InjectSoftwarePipeline(),
        s_tir.transform.TransformMmaBufferLayout(),
        s_tir.transform.LowerOpaqueBlock(),
        s_tir.backend.adreno.transform.InjectTextureAlloc(),
        tirx.transform.FlattenBuffer(),
        tirx.transform.BF16ComputeLegalize(),
        # The narrowing may bound an index by a condition, partitioning reads
        # them, and vectorizing handles if_then_else on its own.
        ShowConditions,
        tirx.transform.NarrowDataType(32),
        s_tir.transform.LoopPartition(),
        tirx.transform.VectorizeLoop(not _option("tirx.disable_vectorize")),
        HideConditions,
        s_tir.transform.InjectVirtualThread(),
        s_tir.transform.InjectDoubleBuffer(),
    ]
    if not _option("tirx.disable_storage_rewrite"):
        passes.append(tirx.transform.StorageRewrite())
    if _option("tirx.use_async_copy"):
        passes.append(s_tir.transform.LowerAsyncDMA())
    passes += [
        HoistIfThenElseWhereAny,
        tirx.transform.UnrollLoop(),
        s_tir.transform.RenormalizeSplitPattern(),
        tirx.transform.StmtSimplify(),
        tirx.transform.RemoveNoOp(),
        s_tir.transform.RewriteUnsafeSelect(),
    ]
    if _option("tirx.instrument_bound_checkers"):
        passes.append(s_tir.transform.InstrumentBoundCheckers())
    if _option("tirx.s_tir.ldg32"):
        passes.append(s_tir.transform.InjectPTXLDG32(True))
    if not _option("tirx.disable_cse_tir"):
        passes.append(tirx.transform.CommonSubexprElim())
    if _option("tirx.instrument_lwp"):
        passes.append(s_tir.transform.InstrumentProfileIntrinsics())
    passes += [
        ShowConditions,
        tirx.transform.FP8ComputeLegalize(),
        s_tir.transform.VerifyVTCMLimit(),
        s_tir.transform.LowerVtcmAlloc(),
        tirx.transform.VerifyMemory(),
        tirx.transform.AnnotateEntryFunc(),
        s_tir.transform.ThreadSync("shared"),
        s_tir.transform.ThreadSync("shared.dyn"),
        s_tir.transform.ThreadSync("warp"),
        s_tir.transform.InferFragment(),
        s_tir.transform.LowerThreadAllreduce(),
    ]
    if _option("tirx.use_async_copy"):
        passes.append(s_tir.transform.InjectPTXAsyncCopy())
    if _option("tirx.s_tir.ldg32"):
        passes.append(s_tir.transform.InjectPTXLDG32())
    passes += [
        s_tir.transform.MergeSharedMemoryAllocations(),
        tirx.transform.SplitHostDevice(),
        tirx.transform.MakePackedAPI(),
        tirx.transform.FP8StorageLegalize(),
        tirx.transform.BF16StorageLegalize(),
    ]
    return passes


@tvm.transform.module_pass(opt_level=0, name="texscope.AdrenoTIRPipeline")
def adreno_tir_pipeline(mod: tvm.IRModule, _ctx) -> tvm.IRModule:
    """:func:`adreno_tir_passes`, run in order."""
    return tvm.transform.Sequential(adreno_tir_passes())(mod)
