use super::*;

const LAYOUT: CidLayout = CidLayout {
    len: 12,
    rotation: 0,
    zone_byte: 2,
};

/// Where each jump of the program lands (index + 1 + off).
fn target(p: &[Insn], i: usize) -> usize {
    (i as isize + 1 + p[i].off as isize) as usize
}

#[test]
fn jumps_land_where_the_listing_says() {
    let p = program(7, LAYOUT);
    assert_eq!(p.len(), 29);
    let pass = p.len() - 2;
    assert_eq!(p[pass], insn(MOV64_IMM, R0, 0, 0, SK_PASS));
    assert_eq!(p.last().unwrap().code, EXIT);
    // The failed load, a long header of another length, another layout: the kernel's hash.
    for i in [6, 11, 18] {
        assert_eq!(target(&p, i), pass, "jump {i}");
    }
    // A short header reads its ID from byte 1.
    assert_eq!(target(&p, 9), 15);
    assert_eq!(p[15], insn(LDX_B, R2, R10, BUF + 1, 0));
    assert_eq!(p[16], insn(LDX_B, R3, R10, BUF + 1 + 2, 0));
    // A long header's ID follows the version and its length.
    assert_eq!(p[13], insn(LDX_B, R3, R10, BUF + 6 + 2, 0));
    assert_eq!(target(&p, 14), 17);
    assert_eq!(p[11].imm, 12);
    assert_eq!(p[18].imm, 0);
    // The map's descriptor, in LD_IMM64's first slot.
    assert_eq!(p[21], insn(LD_IMM64, R2, BPF_PSEUDO_MAP_FD, 0, 7));
    assert_eq!(p[26].imm, FN_SK_SELECT_REUSEPORT);
}

#[test]
fn the_copy_stays_clear_of_the_key() {
    // Bytes [BUF, BUF + len) of the stack hold the packet's copy, [-4, 0) the key.
    for zone_byte in 1..20u8 {
        let l = CidLayout {
            zone_byte,
            len: 21,
            ..LAYOUT
        };
        assert!(i32::from(BUF) + read_len(l) <= -4, "zone byte {zone_byte}");
    }
}

#[test]
fn layouts_whose_zone_is_not_in_the_id_are_refused() {
    let s = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    let bad = CidLayout {
        zone_byte: 12,
        ..LAYOUT
    };
    let e = QuicSteering::attach(&[&s], bad).unwrap_err();
    assert!(e.to_string().contains("outside the ID"), "{e}");
}
