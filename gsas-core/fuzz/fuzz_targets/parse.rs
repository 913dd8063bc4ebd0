//! Every wire parse entry point on arbitrary bytes: no panic, and whatever parses re-emits
//! to bytes that parse to the same representation.
#![no_main]

use gsas_core::wire::{
    AtomicDesc, Packet, ReplyPacket, ReplyRepr, Repr, RequestRepr, peek_sender, peek_token,
    peek_type,
};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|bytes: &[u8]| {
    let _ = (peek_type(bytes), peek_token(bytes), peek_sender(bytes));
    if let Some(&b) = bytes.get(1) {
        if let Ok(d) = AtomicDesc::from_byte(b) {
            assert_eq!(d.to_byte(), b);
        }
    }
    if let Ok(p) = Packet::new_checked(bytes) {
        let _ = (
            p.packet_type(),
            p.sub(),
            p.sender(),
            p.addr(),
            p.arg(),
            p.total_len(),
        );
        let _ = (p.frag_offset(), p.token(), p.frag_len(), p.payload());
        if let Ok(r) = RequestRepr::parse(&p) {
            let mut out = vec![0u8; r.buffer_len()];
            r.emit(&mut Packet::new_unchecked(&mut out[..]));
            assert_eq!(
                RequestRepr::parse(&Packet::new_checked(&out[..]).unwrap()).unwrap(),
                r
            );
        }
    }
    if let Ok(p) = ReplyPacket::new_checked(bytes) {
        let _ = (
            p.packet_type(),
            p.status(),
            p.payload_len(),
            p.flags(),
            p.token(),
            p.payload(),
        );
    }
    let _ = RequestRepr::parse(&Packet::new_unchecked(bytes));
    if let Ok(r) = ReplyRepr::parse(bytes) {
        let mut out = vec![0u8; r.buffer_len()];
        r.emit(&mut out);
        assert_eq!(ReplyRepr::parse(&out).unwrap(), r);
    }
    if let Ok(r) = Repr::parse(bytes) {
        let mut out = vec![0u8; r.buffer_len()];
        r.emit(&mut out);
        assert_eq!(Repr::parse(&out).unwrap(), r);
    }
});
