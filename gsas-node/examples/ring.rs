//! A ring of puts and a global atomic counter, each checked: run it as
//!
//! ```text
//! cargo build --release -p gsas-launch -p gsas-node --bins --examples
//! target/release/oshrun -n 4 target/release/examples/ring
//! ```
//!
//! Every PE puts a value into its right neighbour's symmetric heap and into a global
//! variable of its right neighbour (the data segment is remapped onto shared memory, so
//! globals are symmetric as in C OpenSHMEM programs), and adds its rank + 1 to a counter
//! on PE 0. After a barrier each PE checks what it received, and PE 0 checks the counter
//! (`n (n + 1) / 2`). The program exits non-zero on any mismatch.

use std::process::ExitCode;
use std::sync::atomic::{AtomicU64, Ordering};

use gsas_core::wire::{AtomicOp, AtomicType};
use gsas_node::{Ctx, DATA, HEAP, Node, NodeError, NodeOptions};

/// A global written by the left neighbour (symmetric: same offset in every PE's data
/// segment).
static FROM_LEFT: AtomicU64 = AtomicU64::new(0);

fn value(pe: u32) -> u64 {
    1000 + u64::from(pe) * 7
}

fn run(node: &Node) -> Result<Result<String, String>, NodeError> {
    let (me, n) = (node.rank(), node.size());
    let (right, left) = ((me + 1) % n, (me + n - 1) % n);
    let inbox = node.calloc(1, 8)?.expect("8 bytes of symmetric heap");
    let counter = node.calloc(1, 8)?.expect("8 bytes of symmetric heap");
    let data = node.data_segment().expect("the data segment was remapped");
    let global = data
        .offset_of(&FROM_LEFT as *const AtomicU64 as usize)
        .expect("FROM_LEFT lies in the data segment");
    node.barrier_all()?;

    node.put(Ctx::DEFAULT, right, HEAP, inbox, &value(me).to_le_bytes())?;
    node.put(Ctx::DEFAULT, right, DATA, global, &value(me).to_le_bytes())?;
    node.atomic(
        Ctx::DEFAULT,
        0,
        HEAP,
        counter,
        AtomicOp::Add,
        AtomicType::U64,
        u64::from(me) + 1,
        0,
    )?;
    node.barrier_all()?;

    let mut got = [0u8; 8];
    node.get(Ctx::DEFAULT, me, HEAP, inbox, &mut got)?;
    let heap_value = u64::from_le_bytes(got);
    let global_value = FROM_LEFT.load(Ordering::Acquire);
    if heap_value != value(left) || global_value != value(left) {
        return Ok(Err(format!(
            "PE {me}: expected {} from PE {left}, heap has {heap_value}, global has {global_value}",
            value(left)
        )));
    }
    if me != 0 {
        return Ok(Ok(String::new()));
    }
    node.get(Ctx::DEFAULT, 0, HEAP, counter, &mut got)?;
    let total = u64::from_le_bytes(got);
    let want = u64::from(n) * u64::from(n + 1) / 2;
    if total != want {
        return Ok(Err(format!("global counter is {total}, expected {want}")));
    }
    Ok(Ok(format!(
        "ring of {n} PEs: every PE received its left neighbour's value in its heap and in a global; global counter = {total} (expected {want}): OK"
    )))
}

fn main() -> ExitCode {
    // Remapping the globals must happen before the program starts threads: first thing.
    let node = match Node::init(NodeOptions {
        remap_data: true,
        ..NodeOptions::default()
    }) {
        Ok(n) => n,
        Err(e) => {
            eprintln!("ring: start-up failed: {e}");
            return ExitCode::FAILURE;
        }
    };
    let outcome = run(&node);
    let finalized = node.finalize();
    match (outcome, finalized) {
        (Ok(Ok(line)), Ok(())) => {
            if !line.is_empty() {
                println!("{line}");
            }
            ExitCode::SUCCESS
        }
        (Ok(Err(mismatch)), _) => {
            eprintln!("ring: {mismatch}");
            ExitCode::FAILURE
        }
        (Err(e), _) | (Ok(Ok(_)), Err(e)) => {
            eprintln!("ring: PE {}: {e}", node.rank());
            ExitCode::FAILURE
        }
    }
}
