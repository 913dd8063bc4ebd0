//! `PMI_process_mapping`: which node each rank runs on.
//!
//! What it is: the parser and formatter of MPICH's mapping string
//! `(vector,(start,nodes,ppn),...)` and its expansion into a node-of-rank table. Each block
//! gives `ppn` consecutive ranks to each of the nodes `start`, `start + 1`, ...,
//! `start + nodes - 1`; when the blocks assign fewer ranks than the job has, the whole
//! vector repeats (Hydra describes `-n 2` on one host as `(vector,(0,1,1))`, and two hosts
//! with one rank each, round robin, as `(vector,(0,2,1))`). Node numbers are job-local
//! indices, not host names.
//!
//! What it is not: a host-name service; the launcher and the node map decide what a node
//! index means. Parsing never panics. Thread-safety: plain data.

use std::fmt;

use super::PmiError;

/// One `(start,nodes,ppn)` block.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Block {
    /// First node index of the block.
    pub start_node: u32,
    /// Number of consecutive nodes.
    pub nodes: u32,
    /// Consecutive ranks placed on each node.
    pub ppn: u32,
}

/// A parsed `PMI_process_mapping` value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProcessMapping {
    blocks: Vec<Block>,
}

impl ProcessMapping {
    /// Wraps blocks; fails when a block's node range overflows `u32`.
    pub fn from_blocks(blocks: Vec<Block>) -> Result<Self, PmiError> {
        for b in &blocks {
            if b.start_node.checked_add(b.nodes).is_none() {
                return Err(PmiError::Invalid(format!(
                    "process mapping block {b:?} runs past node {}",
                    u32::MAX
                )));
            }
        }
        Ok(ProcessMapping { blocks })
    }

    /// The mapping that describes an explicit node-of-rank table, as compact as runs of
    /// equal nodes allow (`[0,0,1,1]` gives `(vector,(0,2,2))`).
    pub fn from_node_of_rank(node_of_rank: &[u32]) -> Self {
        let mut blocks: Vec<Block> = Vec::new();
        let mut i = 0;
        while i < node_of_rank.len() {
            let node = node_of_rank[i];
            let run = node_of_rank[i..].iter().take_while(|&&n| n == node).count();
            // A run never exceeds the slice length, which a caller cannot make exceed
            // u32::MAX ranks in a PMI job; saturate rather than wrap.
            let ppn = u32::try_from(run).unwrap_or(u32::MAX);
            match blocks.last_mut() {
                Some(b) if b.ppn == ppn && b.start_node.checked_add(b.nodes) == Some(node) => {
                    b.nodes += 1;
                }
                _ => blocks.push(Block {
                    start_node: node,
                    nodes: 1,
                    ppn,
                }),
            }
            i += run;
        }
        ProcessMapping { blocks }
    }

    /// The blocks in order.
    pub fn blocks(&self) -> &[Block] {
        &self.blocks
    }

    /// Parses `(vector,(s,n,p),...)`; spaces between tokens are tolerated.
    pub fn parse(text: &str) -> Result<Self, PmiError> {
        let err = |reason: &str| {
            PmiError::Invalid(format!(
                "PMI_process_mapping {:?}: {reason}",
                super::wire::excerpt(text)
            ))
        };
        let mut p = Cursor {
            s: text.as_bytes(),
            i: 0,
        };
        if !p.eat(b'(') || !p.eat_word(b"vector") {
            return Err(err("expected it to start with (vector"));
        }
        let mut blocks = Vec::new();
        loop {
            if p.eat(b')') {
                break;
            }
            if !p.eat(b',') || !p.eat(b'(') {
                return Err(err("expected ,( or ) after a block"));
            }
            let start_node = p.number().ok_or_else(|| err("bad start node"))?;
            if !p.eat(b',') {
                return Err(err("expected , after the start node"));
            }
            let nodes = p.number().ok_or_else(|| err("bad node count"))?;
            if !p.eat(b',') {
                return Err(err("expected , after the node count"));
            }
            let ppn = p.number().ok_or_else(|| err("bad ranks-per-node count"))?;
            if !p.eat(b')') {
                return Err(err("expected ) after a block"));
            }
            blocks.push(Block {
                start_node,
                nodes,
                ppn,
            });
        }
        if !p.at_end() {
            return Err(err("trailing characters after the closing )"));
        }
        Self::from_blocks(blocks).map_err(|e| err(&e.to_string()))
    }

    /// The node of every rank of a job of `size` ranks, repeating the vector as needed.
    pub fn node_of_rank(&self, size: u32) -> Result<Vec<u32>, PmiError> {
        let per_pass: u64 = self
            .blocks
            .iter()
            .map(|b| u64::from(b.nodes) * u64::from(b.ppn))
            .sum();
        if per_pass == 0 && size > 0 {
            return Err(PmiError::Invalid(format!(
                "process mapping {self} places no ranks, cannot place {size}"
            )));
        }
        let size = size as usize;
        let mut out = Vec::with_capacity(size);
        while out.len() < size {
            for b in &self.blocks {
                for n in 0..b.nodes {
                    for _ in 0..b.ppn {
                        if out.len() == size {
                            return Ok(out);
                        }
                        // from_blocks checked that start_node + nodes fits.
                        out.push(b.start_node + n);
                    }
                }
            }
        }
        Ok(out)
    }
}

impl fmt::Display for ProcessMapping {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("(vector")?;
        for b in &self.blocks {
            write!(f, ",({},{},{})", b.start_node, b.nodes, b.ppn)?;
        }
        f.write_str(")")
    }
}

struct Cursor<'a> {
    s: &'a [u8],
    i: usize,
}

impl Cursor<'_> {
    fn skip_spaces(&mut self) {
        while self.s.get(self.i) == Some(&b' ') {
            self.i += 1;
        }
    }

    fn eat(&mut self, c: u8) -> bool {
        self.skip_spaces();
        if self.s.get(self.i) == Some(&c) {
            self.i += 1;
            true
        } else {
            false
        }
    }

    fn eat_word(&mut self, w: &[u8]) -> bool {
        self.skip_spaces();
        if self.s[self.i..].starts_with(w) {
            self.i += w.len();
            true
        } else {
            false
        }
    }

    fn number(&mut self) -> Option<u32> {
        self.skip_spaces();
        let start = self.i;
        while self.s.get(self.i).is_some_and(u8::is_ascii_digit) {
            self.i += 1;
        }
        std::str::from_utf8(&self.s[start..self.i])
            .ok()?
            .parse()
            .ok()
    }

    fn at_end(&mut self) -> bool {
        self.skip_spaces();
        self.i == self.s.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hydra_single_host_repeats() {
        let m = ProcessMapping::parse("(vector,(0,1,1))").unwrap();
        assert_eq!(m.node_of_rank(4).unwrap(), vec![0, 0, 0, 0]);
        let m = ProcessMapping::parse("(vector,(0,1,4))").unwrap();
        assert_eq!(m.node_of_rank(4).unwrap(), vec![0, 0, 0, 0]);
    }

    #[test]
    fn round_robin_and_blocks() {
        let rr = ProcessMapping::parse("(vector,(0,2,1))").unwrap();
        assert_eq!(rr.node_of_rank(5).unwrap(), vec![0, 1, 0, 1, 0]);
        let m = ProcessMapping::parse(" ( vector , (0,2,2), (5,1,3) ) ").unwrap();
        assert_eq!(
            m.blocks(),
            &[
                Block {
                    start_node: 0,
                    nodes: 2,
                    ppn: 2
                },
                Block {
                    start_node: 5,
                    nodes: 1,
                    ppn: 3
                }
            ]
        );
        assert_eq!(m.node_of_rank(7).unwrap(), vec![0, 0, 1, 1, 5, 5, 5]);
        assert_eq!(m.node_of_rank(0).unwrap(), Vec::<u32>::new());
    }

    #[test]
    fn slurm_placements() {
        // srun -N 4 -n 8 (block): two per node in one block.
        let m = ProcessMapping::parse("(vector,(0,4,2))").unwrap();
        assert_eq!(m.node_of_rank(8).unwrap(), [0, 0, 1, 1, 2, 2, 3, 3]);
        // srun -N 4 -n 8 -m cyclic: one per node, the vector repeated.
        let m = ProcessMapping::parse("(vector,(0,4,1))").unwrap();
        assert_eq!(m.node_of_rank(8).unwrap(), [0, 1, 2, 3, 0, 1, 2, 3]);
        // srun -N 4 -n 6 -m cyclic: the second pass covers only nodes 0 and 1.
        let m = ProcessMapping::parse("(vector,(0,4,1),(0,2,1))").unwrap();
        assert_eq!(m.node_of_rank(6).unwrap(), [0, 1, 2, 3, 0, 1]);
        // srun -N 3 -n 8 (block, uneven): 3 + 3 + 2.
        let m = ProcessMapping::parse("(vector,(0,2,3),(2,1,2))").unwrap();
        assert_eq!(m.node_of_rank(8).unwrap(), [0, 0, 0, 1, 1, 1, 2, 2]);
        // Arbitrary blocks that revisit nodes.
        let m = ProcessMapping::parse("(vector,(1,1,2),(0,1,1),(1,1,1),(0,2,1))").unwrap();
        assert_eq!(m.node_of_rank(6).unwrap(), [1, 1, 0, 1, 0, 1]);
    }

    #[test]
    fn table_round_trip() {
        for table in [
            vec![0, 0, 0, 0],
            vec![0, 0, 1, 1, 2, 2, 3],
            vec![3, 3, 1, 0, 0, 0],
            vec![0, 1, 0, 1],
            vec![7],
        ] {
            let m = ProcessMapping::from_node_of_rank(&table);
            let text = m.to_string();
            let back = ProcessMapping::parse(&text).unwrap();
            assert_eq!(back, m);
            assert_eq!(
                back.node_of_rank(table.len() as u32).unwrap(),
                table,
                "{text}"
            );
        }
        assert_eq!(
            ProcessMapping::from_node_of_rank(&[0, 0, 1, 1, 2, 2, 3]).to_string(),
            "(vector,(0,3,2),(3,1,1))"
        );
    }

    #[test]
    fn rejects_garbage_without_panicking() {
        for bad in [
            "",
            "(",
            "(vector",
            "(vector,",
            "(vector,(1,2))",
            "(vector,(1,2,3)",
            "(vector,(1,2,3)) x",
            "(vector,(a,2,3))",
            "(vector,(4294967295,2,1))",
            "(vector,(99999999999,1,1))",
            "(list,(0,1,1))",
            "vector,(0,1,1)",
        ] {
            assert!(ProcessMapping::parse(bad).is_err(), "{bad:?} accepted");
        }
        let empty = ProcessMapping::parse("(vector)").unwrap();
        assert!(empty.node_of_rank(1).is_err());
        let zero = ProcessMapping::parse("(vector,(0,3,0))").unwrap();
        assert!(zero.node_of_rank(2).is_err());
    }
}
