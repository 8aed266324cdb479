//! Runs: the records of a graph taking its specs (or a queue's pending members) through its
//! nodes. A run row holds where the run stands; `run_specs` each spec the run reached and how it
//! ended; `node_runs` every executor call. The records and their states live in the store.

pub use canopy_model::records::runs::{
    NodeRun, NodeRunStatus, Run, RunSpec, RunStatus, SpecResult,
};
