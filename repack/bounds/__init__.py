"""The pattern LPs: bounds that prove a phase, and the packings they lead to (see
``docs/architecture.md#repack-phases``).

* ``patterns`` — every maximal pattern of a group of interchangeable nodes, for exact pricing;
* ``columns`` — the column pool of a column-generation master LP (GLOP), shared by both LPs;
* ``pricing`` — the knapsack pricing of the place LP's columns (grid, branch and bound);
* ``grid_knapsack`` — pricing on a capacity grid where at most two resources bind;
* ``placement`` — the place phase's upper bound on placed pods, its dive and price-and-branch;
* ``node_pricing`` — the pricing of a node's pattern in the disruption LP (listed or knapsack);
* ``disruption_lp`` — the disrupt phase's per-node master LP, its column generation and dives;
* ``disruption`` — the disrupt phase's lower bound on disruption, its dives and reduced-cost pick;
* ``disruption_choice`` — the disrupt phase's price-and-branch, and assignments from patterns.
"""
