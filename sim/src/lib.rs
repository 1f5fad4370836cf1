//! Deterministic network simulation of a limitmesh cluster (turmoil).
