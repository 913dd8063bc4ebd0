//! Intrusive AVL trees over slot indices, the two indexes of the allocator.
//!
//! What it is: insertion, removal and ordered search on height-balanced binary search trees
//! whose nodes are [`Slot`]s linked by index. One slot is in at most one tree at a time
//! (free blocks in the free tree, live blocks in the live tree), so one set of links serves
//! both. Keys are unique: offsets of live blocks for [`Order::Offset`], (size, offset) of free
//! blocks for [`Order::SizeOffset`].
//!
//! What it is not: a general container; it knows nothing about block states or the heap.
//!
//! Complexity: every operation is O(log n); the height of an AVL tree of n nodes is below
//! 1.45 log2(n + 2), so the recursion is at most 47 frames deep even for `u32::MAX` nodes.
//! Thread-safety: free functions on a `&mut [Slot]`; the caller serialises.

use core::cmp::Ordering;

use super::slot::{Idx, NIL, Slot};

/// Which key a tree is ordered by.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Order {
    /// Live blocks, by offset.
    Offset,
    /// Free blocks, by size and then offset (best fit, lowest address among equals).
    SizeOffset,
}

/// The key of slot `i` in a tree of the given order.
#[inline]
pub(super) fn key(s: &[Slot], i: Idx, order: Order) -> (u64, u64) {
    let slot = &s[i as usize];
    match order {
        Order::Offset => (slot.offset, 0),
        Order::SizeOffset => (slot.size, slot.offset),
    }
}

#[inline]
fn height(s: &[Slot], i: Idx) -> u8 {
    if i == NIL { 0 } else { s[i as usize].height }
}

#[inline]
fn fix_height(s: &mut [Slot], i: Idx) {
    let h = 1 + height(s, s[i as usize].left).max(height(s, s[i as usize].right));
    s[i as usize].height = h;
}

fn rotate_right(s: &mut [Slot], i: Idx) -> Idx {
    let l = s[i as usize].left;
    s[i as usize].left = s[l as usize].right;
    s[l as usize].right = i;
    fix_height(s, i);
    fix_height(s, l);
    l
}

fn rotate_left(s: &mut [Slot], i: Idx) -> Idx {
    let r = s[i as usize].right;
    s[i as usize].right = s[r as usize].left;
    s[r as usize].left = i;
    fix_height(s, i);
    fix_height(s, r);
    r
}

/// Restores the AVL property at `i` (whose subtrees are valid AVL trees differing in height
/// by at most 2) and returns the new root of the subtree.
fn rebalance(s: &mut [Slot], i: Idx) -> Idx {
    fix_height(s, i);
    let l = s[i as usize].left;
    let r = s[i as usize].right;
    let (hl, hr) = (height(s, l), height(s, r));
    if hl > hr + 1 {
        if height(s, s[l as usize].left) < height(s, s[l as usize].right) {
            s[i as usize].left = rotate_left(s, l);
        }
        rotate_right(s, i)
    } else if hr > hl + 1 {
        if height(s, s[r as usize].right) < height(s, s[r as usize].left) {
            s[i as usize].right = rotate_right(s, r);
        }
        rotate_left(s, i)
    } else {
        i
    }
}

/// Inserts slot `node` (not in any tree, key not yet present) into the tree rooted at `root`
/// and returns the new root.
pub(super) fn insert(s: &mut [Slot], root: Idx, node: Idx, order: Order) -> Idx {
    if root == NIL {
        let n = &mut s[node as usize];
        n.left = NIL;
        n.right = NIL;
        n.height = 1;
        return node;
    }
    if key(s, node, order) < key(s, root, order) {
        let l = insert(s, s[root as usize].left, node, order);
        s[root as usize].left = l;
    } else {
        let r = insert(s, s[root as usize].right, node, order);
        s[root as usize].right = r;
    }
    rebalance(s, root)
}

/// Removes slot `node`, which must be in the tree rooted at `root` with its current key, and
/// returns the new root.
pub(super) fn remove(s: &mut [Slot], root: Idx, node: Idx, order: Order) -> Idx {
    let k = key(s, node, order);
    remove_key(s, root, k, order)
}

fn remove_key(s: &mut [Slot], t: Idx, k: (u64, u64), order: Order) -> Idx {
    if t == NIL {
        debug_assert!(false, "symheap: removing a key that is not in the tree");
        return NIL;
    }
    match k.cmp(&key(s, t, order)) {
        Ordering::Less => {
            let l = remove_key(s, s[t as usize].left, k, order);
            s[t as usize].left = l;
        }
        Ordering::Greater => {
            let r = remove_key(s, s[t as usize].right, k, order);
            s[t as usize].right = r;
        }
        Ordering::Equal => {
            let l = s[t as usize].left;
            let r = s[t as usize].right;
            if r == NIL {
                return l;
            }
            // Put the smallest node of the right subtree in `t`'s place.
            let (r, m) = remove_min(s, r);
            s[m as usize].left = l;
            s[m as usize].right = r;
            return rebalance(s, m);
        }
    }
    rebalance(s, t)
}

/// Detaches the smallest node of the non-empty tree `t`; returns (new root, detached node).
fn remove_min(s: &mut [Slot], t: Idx) -> (Idx, Idx) {
    let l = s[t as usize].left;
    if l == NIL {
        return (s[t as usize].right, t);
    }
    let (l, m) = remove_min(s, l);
    s[t as usize].left = l;
    (rebalance(s, t), m)
}

/// The node whose key equals `k`, or [`NIL`].
pub(super) fn find(s: &[Slot], mut t: Idx, k: (u64, u64), order: Order) -> Idx {
    while t != NIL {
        match k.cmp(&key(s, t, order)) {
            Ordering::Less => t = s[t as usize].left,
            Ordering::Greater => t = s[t as usize].right,
            Ordering::Equal => return t,
        }
    }
    NIL
}

/// The node with the smallest key `>= k`, or [`NIL`].
pub(super) fn lower_bound(s: &[Slot], mut t: Idx, k: (u64, u64), order: Order) -> Idx {
    let mut best = NIL;
    while t != NIL {
        if key(s, t, order) >= k {
            best = t;
            t = s[t as usize].left;
        } else {
            t = s[t as usize].right;
        }
    }
    best
}

/// The node with the largest key, or [`NIL`] for an empty tree.
pub(super) fn last(s: &[Slot], mut t: Idx) -> Idx {
    if t == NIL {
        return NIL;
    }
    while s[t as usize].right != NIL {
        t = s[t as usize].right;
    }
    t
}

/// Checks order, stored heights and the AVL balance of the tree rooted at `t`, and that every
/// key lies in the open interval `(lo, hi)` (`None` = unbounded). Returns (height, nodes).
pub(super) fn check(
    s: &[Slot],
    t: Idx,
    order: Order,
    lo: Option<(u64, u64)>,
    hi: Option<(u64, u64)>,
) -> Result<(u8, usize), &'static str> {
    if t == NIL {
        return Ok((0, 0));
    }
    if t as usize >= s.len() {
        return Err("tree link points outside the slot storage");
    }
    let k = key(s, t, order);
    if lo.is_some_and(|lo| k <= lo) || hi.is_some_and(|hi| k >= hi) {
        return Err("tree keys out of order");
    }
    let (hl, nl) = check(s, s[t as usize].left, order, lo, Some(k))?;
    let (hr, nr) = check(s, s[t as usize].right, order, Some(k), hi)?;
    if hl.abs_diff(hr) > 1 {
        return Err("tree out of balance");
    }
    let h = 1 + hl.max(hr);
    if s[t as usize].height != h {
        return Err("stored tree height is wrong");
    }
    Ok((h, nl + nr + 1))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Builds slots whose offsets are the given keys, one per slot.
    fn slots_with_offsets(keys: &[u64]) -> Vec<Slot> {
        keys.iter()
            .map(|&k| Slot {
                offset: k,
                size: 16,
                ..Slot::EMPTY
            })
            .collect()
    }

    fn in_order(s: &[Slot], t: Idx, out: &mut Vec<u64>) {
        if t != NIL {
            in_order(s, s[t as usize].left, out);
            out.push(s[t as usize].offset);
            in_order(s, s[t as usize].right, out);
        }
    }

    #[test]
    fn ascending_inserts_stay_balanced_and_ordered() {
        let keys: Vec<u64> = (0..1000).map(|k| k * 16).collect();
        let mut s = slots_with_offsets(&keys);
        let mut root = NIL;
        for i in 0..keys.len() as Idx {
            root = insert(&mut s, root, i, Order::Offset);
        }
        let (h, n) = check(&s, root, Order::Offset, None, None).unwrap();
        assert_eq!(n, 1000);
        // 1.45 * log2(1002) < 14.5
        assert!(h <= 14, "height {h}");
        let mut out = Vec::new();
        in_order(&s, root, &mut out);
        assert_eq!(out, keys);
    }

    #[test]
    fn remove_every_other_then_search() {
        // A scrambled insertion order (multiplication by an odd constant mod 2^10).
        let keys: Vec<u64> = (0..1024u64).map(|k| ((k * 677) % 1024) * 16).collect();
        let mut s = slots_with_offsets(&keys);
        let mut root = NIL;
        for i in 0..keys.len() as Idx {
            root = insert(&mut s, root, i, Order::Offset);
        }
        for i in (0..keys.len() as Idx).filter(|i| keys[*i as usize] % 32 == 0) {
            root = remove(&mut s, root, i, Order::Offset);
            check(&s, root, Order::Offset, None, None).unwrap();
        }
        let (_, n) = check(&s, root, Order::Offset, None, None).unwrap();
        assert_eq!(n, 512);
        for k in (0..1024u64).map(|k| k * 16) {
            let hit = find(&s, root, (k, 0), Order::Offset);
            if k % 32 == 0 {
                assert_eq!(hit, NIL, "key {k} was removed");
            } else {
                assert_eq!(s[hit as usize].offset, k);
            }
        }
        // lower_bound of a removed key finds the next remaining one.
        let lb = lower_bound(&s, root, (64, 0), Order::Offset);
        assert_eq!(s[lb as usize].offset, 80);
        assert_eq!(lower_bound(&s, root, (1024 * 16, 0), Order::Offset), NIL);
        assert_eq!(s[last(&s, root) as usize].offset, 1023 * 16);
    }

    #[test]
    fn size_order_breaks_ties_by_offset() {
        let mut s = vec![
            Slot {
                offset: 320,
                size: 64,
                ..Slot::EMPTY
            },
            Slot {
                offset: 32,
                size: 64,
                ..Slot::EMPTY
            },
            Slot {
                offset: 160,
                size: 32,
                ..Slot::EMPTY
            },
        ];
        let mut root = NIL;
        for i in 0..3 {
            root = insert(&mut s, root, i, Order::SizeOffset);
        }
        assert_eq!(lower_bound(&s, root, (33, 0), Order::SizeOffset), 1);
        assert_eq!(lower_bound(&s, root, (64, 33), Order::SizeOffset), 0);
        assert_eq!(lower_bound(&s, root, (1, 0), Order::SizeOffset), 2);
        assert_eq!(last(&s, root), 0);
        root = remove(&mut s, root, 0, Order::SizeOffset);
        assert_eq!(last(&s, root), 1);
        assert_eq!(check(&s, root, Order::SizeOffset, None, None), Ok((2, 2)));
    }

    #[test]
    fn check_detects_corruption() {
        let mut s = slots_with_offsets(&[16, 32, 48]);
        let mut root = NIL;
        for i in 0..3 {
            root = insert(&mut s, root, i, Order::Offset);
        }
        s[0].offset = 1000;
        assert_eq!(
            check(&s, root, Order::Offset, None, None),
            Err("tree keys out of order")
        );
    }
}
