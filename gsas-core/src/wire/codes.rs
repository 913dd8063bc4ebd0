//! One-byte enumerations carried on the wire: packet types, error codes, control codes.
//!
//! Every enumeration read from the wire keeps an `Unknown(u8)` variant so that converting a
//! byte never fails and never loses information: `u8::from(T::from(b)) == b` for every `b`.
//! These are plain `Copy` values, freely shared between threads.

/// Declares a wire enumeration with an `Unknown(u8)` variant and lossless `u8` conversions.
macro_rules! wire_enum {
    (
        $(#[$meta:meta])*
        pub enum $name:ident {
            $( $(#[$vmeta:meta])* $variant:ident = $value:expr, )+
        }
    ) => {
        $(#[$meta])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        #[cfg_attr(feature = "defmt", derive(defmt::Format))]
        pub enum $name {
            $( $(#[$vmeta])* $variant, )+
            /// A code this version does not know; the byte is kept as received.
            Unknown(u8),
        }

        impl From<u8> for $name {
            #[inline]
            fn from(value: u8) -> Self {
                match value {
                    $( $value => $name::$variant, )+
                    other => $name::Unknown(other),
                }
            }
        }

        impl From<$name> for u8 {
            #[inline]
            fn from(value: $name) -> u8 {
                match value {
                    $( $name::$variant => $value, )+
                    $name::Unknown(other) => other,
                }
            }
        }
    };
}

wire_enum! {
    /// Byte 0 of every packet: what the packet is.
    pub enum PacketType {
        /// Inline read request (`0x01`), answered by DATA.
        Read = 0x01,
        /// Inline write request (`0x02`), answered by ACK.
        Write = 0x02,
        /// Bulk read request for one fragment (`0x03`), answered by BULK_DATA.
        BulkRead = 0x03,
        /// Bulk write request carrying one fragment (`0x04`), answered by ACK.
        BulkWrite = 0x04,
        /// Atomic operation (`0x05`), answered by DATA (fetching ops) or ACK.
        Atomic = 0x05,
        /// Segment allocation, executed by the host (`0x06`).
        Alloc = 0x06,
        /// Segment release, executed by the host (`0x07`).
        Free = 0x07,
        /// Process launch fragment, executed by the host (`0x08`).
        Fork = 0x08,
        /// Control message, executed by the host (`0x09`).
        Control = 0x09,
        /// Acknowledgement without payload (`0x80`).
        Ack = 0x80,
        /// Reply carrying 1..=56 bytes (`0x81`).
        Data = 0x81,
        /// Reply carrying one bulk fragment (`0x82`).
        BulkData = 0x82,
        /// Refusal with an [`ErrorCode`] (`0x83`).
        Error = 0x83,
    }
}

impl PacketType {
    /// Whether this is one of the known request types (`0x01..=0x09`).
    #[inline]
    pub fn is_request(self) -> bool {
        matches!(u8::from(self), 0x01..=0x09)
    }

    /// Whether this is one of the known reply types (`0x80..=0x83`).
    #[inline]
    pub fn is_reply(self) -> bool {
        matches!(u8::from(self), 0x80..=0x83)
    }

    /// A dense index `0..PacketType::COUNT` for counters: known types in code order, then
    /// one bucket for every unknown type.
    #[inline]
    pub fn index(self) -> usize {
        match u8::from(self) {
            c @ 0x01..=0x09 => usize::from(c) - 1,
            c @ 0x80..=0x83 => usize::from(c - 0x80) + 9,
            _ => 13,
        }
    }

    /// Number of distinct values of [`PacketType::index`].
    pub const COUNT: usize = 14;
}

wire_enum! {
    /// Why a request was refused (byte 1 of an ERROR reply).
    pub enum ErrorCode {
        /// The job key is unknown to the service.
        BadKey = 1,
        /// The job has no such (PE, segment).
        NoSegment = 2,
        /// The access reaches past the end of the segment.
        OutOfBounds = 3,
        /// An atomic is not naturally aligned.
        Misaligned = 4,
        /// Invalid atomic descriptor or operand (bad op/datatype combination, non-zero high
        /// half of a 32-bit operand).
        BadAtomic = 5,
        /// The packet type is unknown.
        UnknownType = 6,
        /// The packet is truncated or violates a layout invariant.
        Malformed = 7,
        /// A length exceeds what the packet type allows.
        TooLarge = 8,
        /// The receiver does not implement this request.
        NotSupported = 9,
        /// The receiver cannot take the request now; retry later.
        Busy = 10,
        /// The host failed to execute a host action.
        HostFailure = 11,
    }
}

impl ErrorCode {
    /// A dense index `0..ErrorCode::COUNT` for counters: codes 1..=11 map to 0..=10, every
    /// other code to 11.
    #[inline]
    pub fn index(self) -> usize {
        match u8::from(self) {
            c @ 1..=11 => usize::from(c) - 1,
            _ => 11,
        }
    }

    /// Number of distinct values of [`ErrorCode::index`].
    pub const COUNT: usize = 12;

    /// A short English description, for error messages.
    pub fn describe(self) -> &'static str {
        match self {
            ErrorCode::BadKey => "job key unknown",
            ErrorCode::NoSegment => "no such segment",
            ErrorCode::OutOfBounds => "access out of segment bounds",
            ErrorCode::Misaligned => "atomic not naturally aligned",
            ErrorCode::BadAtomic => "invalid atomic operation",
            ErrorCode::UnknownType => "unknown packet type",
            ErrorCode::Malformed => "malformed packet",
            ErrorCode::TooLarge => "length too large",
            ErrorCode::NotSupported => "not supported",
            ErrorCode::Busy => "busy",
            ErrorCode::HostFailure => "host failure",
            ErrorCode::Unknown(_) => "unknown error code",
        }
    }
}

impl core::fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "{} (code {})", self.describe(), u8::from(*self))
    }
}

wire_enum! {
    /// Byte 1 of a CONTROL request. The arguments' meaning is defined by the host.
    pub enum ControlCode {
        /// Liveness probe.
        Ping = 1,
        /// A process joins a job.
        Join = 2,
        /// A process leaves a job.
        Leave = 3,
        /// The job ends; the service reclaims its memory.
        JobEnd = 4,
        /// Register a segment with the service.
        Register = 5,
        /// Barrier arrival.
        Barrier = 6,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_byte_round_trips() {
        for b in 0..=255u8 {
            assert_eq!(u8::from(PacketType::from(b)), b);
            assert_eq!(u8::from(ErrorCode::from(b)), b);
            assert_eq!(u8::from(ControlCode::from(b)), b);
            assert!(PacketType::from(b).index() < PacketType::COUNT);
            assert!(ErrorCode::from(b).index() < ErrorCode::COUNT);
        }
    }

    #[test]
    fn known_codes() {
        assert_eq!(PacketType::from(0x05), PacketType::Atomic);
        assert_eq!(PacketType::from(0x82), PacketType::BulkData);
        assert_eq!(PacketType::from(0x0a), PacketType::Unknown(0x0a));
        assert_eq!(ErrorCode::from(11), ErrorCode::HostFailure);
        assert_eq!(ErrorCode::from(0), ErrorCode::Unknown(0));
        assert_eq!(ControlCode::from(6), ControlCode::Barrier);
        assert!(PacketType::Control.is_request() && !PacketType::Control.is_reply());
        assert!(PacketType::Error.is_reply() && !PacketType::Unknown(0x84).is_reply());
    }

    #[test]
    fn indices_are_distinct_for_known_types() {
        let mut seen = [false; PacketType::COUNT];
        for b in (0x01..=0x09).chain(0x80..=0x83) {
            let i = PacketType::from(b).index();
            assert!(!seen[i], "index {i} used twice");
            seen[i] = true;
        }
        assert_eq!(PacketType::Unknown(0).index(), 13);
        assert_eq!(ErrorCode::Busy.index(), 9);
        assert_eq!(ErrorCode::Unknown(200).index(), 11);
    }
}
