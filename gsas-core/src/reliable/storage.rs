//! [`Storage`]: a slice the layer either borrows from its caller or owns.

use core::ops::{Deref, DerefMut};

/// The memory a [`Reliable`](super::Reliable) works in (its peer table, its receive buffer
/// and frame pool): either a slice borrowed from the caller or, with the `std` feature, a
/// boxed slice the layer owns and frees when it is dropped.
///
/// Built with `From`/`Into`: `&mut [T]`, `&mut [T; N]` and `&mut Vec<T>` (anything that is
/// `AsMut<[T]>`) borrow; a `Vec<T>` or a `Box<[T]>` (`std`) is owned. Either way it
/// dereferences to `[T]`, and the layer's code is the same for both: a `no_std` caller
/// lends static or stack memory, a std caller hands over heap memory and gets a layer with
/// no lifetime to carry (`Reliable<'static, ..>`). The idea is smoltcp's `ManagedSlice`.
///
/// What it is not: a growable collection. Its length is fixed when it is built; nothing is
/// allocated, moved or freed while the layer runs (an owned slice is freed with the layer).
#[derive(Debug)]
pub enum Storage<'a, T> {
    /// A slice lent by the caller for `'a`.
    Borrowed(&'a mut [T]),
    /// A slice owned by the storage, freed with it. A boxed slice rather than a `Vec`: both
    /// variants are then a pointer and a length at the same offsets, and the deref compiles
    /// to the loads of a plain slice, without a branch on the variant.
    #[cfg(feature = "std")]
    Owned(Box<[T]>),
}

impl<'a, T> Storage<'a, T> {
    /// Splits the storage at `mid` into `[..mid]` and `[mid..]`, both of the same kind:
    /// a borrowed slice is split in place; an owned one keeps `[mid..]` in its allocation
    /// (moved to its front) and moves `[..mid]` into a new one of `mid` elements.
    ///
    /// Panics if `mid > len`.
    pub(crate) fn into_split(self, mid: usize) -> (Storage<'a, T>, Storage<'a, T>) {
        match self {
            Storage::Borrowed(s) => {
                let (head, tail) = s.split_at_mut(mid);
                (Storage::Borrowed(head), Storage::Borrowed(tail))
            }
            #[cfg(feature = "std")]
            Storage::Owned(b) => {
                let mut tail = b.into_vec();
                let head: Box<[T]> = tail.drain(..mid).collect();
                (
                    Storage::Owned(head),
                    Storage::Owned(tail.into_boxed_slice()),
                )
            }
        }
    }
}

impl<T> Deref for Storage<'_, T> {
    type Target = [T];

    #[inline]
    fn deref(&self) -> &[T] {
        match self {
            Storage::Borrowed(s) => s,
            #[cfg(feature = "std")]
            Storage::Owned(b) => b,
        }
    }
}

impl<T> DerefMut for Storage<'_, T> {
    #[inline]
    fn deref_mut(&mut self) -> &mut [T] {
        match self {
            Storage::Borrowed(s) => s,
            #[cfg(feature = "std")]
            Storage::Owned(b) => b,
        }
    }
}

/// Borrows: `&mut [T]`, `&mut [T; N]`, `&mut Vec<T>`, `&mut Box<[T]>`, ...
impl<'a, T, S: AsMut<[T]> + ?Sized> From<&'a mut S> for Storage<'a, T> {
    fn from(s: &'a mut S) -> Self {
        Storage::Borrowed(s.as_mut())
    }
}

/// Owns the vector's elements (its spare capacity is given back).
#[cfg(feature = "std")]
impl<T> From<Vec<T>> for Storage<'_, T> {
    fn from(v: Vec<T>) -> Self {
        Storage::Owned(v.into_boxed_slice())
    }
}

/// Owns the boxed slice.
#[cfg(feature = "std")]
impl<T> From<Box<[T]>> for Storage<'_, T> {
    fn from(b: Box<[T]>) -> Self {
        Storage::Owned(b)
    }
}

#[cfg(test)]
mod tests {
    use super::Storage;

    #[test]
    fn borrowed_derefs_to_the_callers_slice() {
        let mut data = [1u8, 2, 3, 4, 5];
        let mut s: Storage<'_, u8> = (&mut data).into();
        assert_eq!(&*s, &[1, 2, 3, 4, 5]);
        s[0] = 9;
        let (head, mut tail) = s.into_split(2);
        assert_eq!((&*head, &*tail), (&[9u8, 2][..], &[3u8, 4, 5][..]));
        tail[2] = 7;
        drop((head, tail));
        assert_eq!(data, [9, 2, 3, 4, 7]);
        let mut empty: [u8; 0] = [];
        let e: Storage<'_, u8> = (&mut empty[..]).into();
        assert!(e.is_empty());
    }

    #[cfg(feature = "std")]
    #[test]
    fn owned_and_borrowed_deref_to_the_same_data() {
        let mut v = vec![10u32, 20, 30, 40];
        let mut owned: Storage<'static, u32> = v.clone().into();
        let mut borrowed: Storage<'_, u32> = (&mut v).into();
        assert!(matches!(owned, Storage::Owned(_)));
        assert!(matches!(borrowed, Storage::Borrowed(_)));
        assert_eq!(&*owned, &*borrowed);
        owned[1] = 21;
        borrowed[1] = 21;
        assert_eq!(&*owned, &*borrowed);
        let (oh, ot) = owned.into_split(3);
        let (bh, bt) = borrowed.into_split(3);
        assert!(matches!((&oh, &ot), (Storage::Owned(_), Storage::Owned(_))));
        assert_eq!((&*oh, &*ot), (&*bh, &*bt));
        assert_eq!((&*oh, &*ot), (&[10u32, 21, 30][..], &[40u32][..]));
        let (all, none) = Storage::from(vec![1u8, 2].into_boxed_slice()).into_split(2);
        assert_eq!((all.len(), none.len()), (2, 0));
    }

    /// A layer that owns its storage (`Reliable<'static, ..>`, built from `Vec`s) talks to
    /// one that borrows it, both ways: frames of several packets (the later ones wait in
    /// the receive buffer), replies carrying acks, a delayed pure ack, and every frame
    /// buffer back in both pools at the end.
    #[cfg(feature = "std")]
    #[test]
    fn an_owned_layer_talks_to_a_borrowed_one_over_loopback() {
        use crate::reliable::{Config, PeerSlot, Reliable, buffer_len};
        use crate::transport::Transport;
        use crate::transport::loopback::{LoopbackConfig, LoopbackHub};

        fn assert_send<T: Send>(_: &T) {}
        const MTU: usize = 1024;
        let mut net = vec![0u8; 2 * 16 * 1100];
        let hub = LoopbackHub::<2>::new(LoopbackConfig::new(MTU), &mut net).unwrap();
        let mut peers_a = [const { PeerSlot::<usize, 8>::new() }; 2];
        let mut buf_a = vec![0u8; buffer_len(MTU, MTU, 8)];
        let ep = |i| hub.endpoint(i).unwrap();
        let mut a = Reliable::<_, 8>::new(ep(0), Config::new(1), &mut peers_a, &mut buf_a).unwrap();
        let mut b: Reliable<'static, _, 8> = Reliable::new(
            ep(1),
            Config::new(2),
            vec![PeerSlot::new(); 2],
            vec![0u8; buffer_len(MTU, MTU, 8)],
        )
        .unwrap();
        assert_send(&b);
        assert_eq!(a.pool_usage(), b.pool_usage());

        for word in [&b"one"[..], b"two", b"three"] {
            a.send(1, word.len(), |buf| buf.copy_from_slice(word))
                .unwrap();
        }
        a.flush().unwrap();
        let mut got = Vec::new();
        while let Some(p) = b.recv(|from, d| (from, d.to_vec())).unwrap() {
            got.push(p);
        }
        let expect: Vec<_> = [&b"one"[..], b"two", b"three"]
            .map(|w| (0, w.to_vec()))
            .into();
        assert_eq!(got, expect);

        for word in [&b"uno"[..], b"dos"] {
            b.send(0, word.len(), |buf| buf.copy_from_slice(word))
                .unwrap();
        }
        b.flush().unwrap();
        let mut got = Vec::new();
        while let Some(p) = a.recv(|from, d| (from, d.to_vec())).unwrap() {
            got.push(p);
        }
        assert_eq!(got, [(1, b"uno".to_vec()), (1, b"dos".to_vec())]);
        // The reply carried the ack of a's frame; a's delayed ack frees b's.
        let (cap, free) = a.pool_usage();
        assert_eq!(cap, free);
        a.poll(1_000_000).unwrap();
        assert_eq!(b.recv(|_, d| d.len()).unwrap(), None);
        let (cap, free) = b.pool_usage();
        assert_eq!(cap, free);
        assert_eq!((a.stats().frames_acked, b.stats().frames_acked), (1, 1));
        assert_eq!(b.stats().packets_delivered, 3);
    }
}
