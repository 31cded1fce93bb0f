"""Exact minimisation of binary energies with submodular pairwise terms.

An energy over binary variables x_i is a sum of unary terms u_i(x_i) and
pairwise terms E_ij(x_i, x_j).  When every pairwise term is submodular,
E(0,0) + E(1,1) <= E(0,1) + E(1,0), the energy is a cut function of a graph
with a source (label 0) and a sink (label 1), and a minimum s-t cut is an exact
minimiser (Kolmogorov and Zabih, "What energy functions can be minimized via
graph cuts?", 2004).  The cut is found with SciPy's max-flow.
"""

from __future__ import annotations

import numpy as np
from scipy.sparse import csr_matrix
from scipy.sparse.csgraph import breadth_first_order, maximum_flow

# Larger than any finite cut; capacities must stay below 2**31 in total per node.
INFINITE = 1 << 28


class BinaryEnergy:
    """Accumulates unary and pairwise terms, then minimises them."""

    def __init__(self):
        self.count = 0
        self.constant = 0
        self._unary: list[list[int]] = []  # per variable: [cost of 0, cost of 1]
        self._edges: dict[tuple[int, int], int] = {}  # (a, b): cost when a = 0 and b = 1

    def variable(self) -> int:
        self._unary.append([0, 0])
        self.count += 1
        return self.count - 1

    def unary(self, x: int, cost0: int, cost1: int) -> None:
        self._unary[x][0] += cost0
        self._unary[x][1] += cost1

    def pairwise(self, x: int, y: int, e00: int, e01: int, e10: int, e11: int) -> None:
        """Add E(x, y); raises ValueError unless it is submodular."""
        coupling = e01 + e10 - e00 - e11
        if coupling < 0:
            raise ValueError(f"pairwise term on ({x}, {y}) is not submodular")
        # E = e00 + a x + b y + p (1-x) y + q x (1-y) with p + q = coupling.
        # Giving p what (0, 1) costs keeps a and b small, so a forbidden pair
        # is one infinite edge rather than infinite unaries that cancel.
        p = min(max(e01 - e00, 0), coupling)
        q = coupling - p
        self.constant += e00
        self.unary(x, 0, e10 - e00 - q)
        self.unary(y, 0, e01 - e00 - p)
        for edge, weight in (((x, y), p), ((y, x), q)):
            if weight:
                self._edges[edge] = self._edges.get(edge, 0) + weight

    def forbid(self, x: int, y: int, x_value: int, y_value: int) -> None:
        """Forbid x == x_value together with y == y_value (where submodular)."""
        costs = {(0, 0): 0, (0, 1): 0, (1, 0): 0, (1, 1): 0}
        costs[(x_value, y_value)] = INFINITE
        self.pairwise(x, y, costs[(0, 0)], costs[(0, 1)], costs[(1, 0)], costs[(1, 1)])

    def minimise(self) -> tuple[list[int], int]:
        """The labels of a minimum, and its energy."""
        n = self.count
        source, sink = n, n + 1
        rows, cols, caps = [], [], []
        base = self.constant
        for x, (cost0, cost1) in enumerate(self._unary):
            low = min(cost0, cost1)
            base += low
            if cost1 > low:  # choosing 1 costs: cut the edge source -> x
                rows.append(source), cols.append(x), caps.append(cost1 - low)
            if cost0 > low:  # choosing 0 costs: cut the edge x -> sink
                rows.append(x), cols.append(sink), caps.append(cost0 - low)
        for (x, y), weight in self._edges.items():  # x = 0 and y = 1 costs weight
            rows.append(x), cols.append(y), caps.append(weight)
        capacity = csr_matrix(
            (np.minimum(np.array(caps, dtype=np.int64), INFINITE).astype(np.int32), (rows, cols)),
            shape=(n + 2, n + 2),
        )
        flow = maximum_flow(capacity, source, sink, method="dinic")
        # The flow is antisymmetric (flow[y, x] = -flow[x, y]), so this holds
        # the reverse residual of every used edge too, and no negative entry.
        residual = capacity - flow.flow
        residual.eliminate_zeros()  # a saturated edge is no edge (csgraph reads stored zeros)
        reachable = breadth_first_order(residual, source, directed=True,
                                        return_predecessors=False)
        labels = [1] * n
        for node in reachable:
            if node < n:
                labels[node] = 0  # on the source side
        return labels, base + int(flow.flow_value)
