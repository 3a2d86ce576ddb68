use super::*;

const LAYOUT: CidLayout = CidLayout {
    len: 12,
    rotation: 0,
    zone_byte: 2,
    epoch_bit: 0x10,
};

/// Where each jump of the program lands (index + 1 + off).
fn target(p: &[Insn], i: usize) -> usize {
    (i as isize + 1 + p[i].off as isize) as usize
}

fn is_jump(i: &Insn) -> bool {
    matches!(i.code, JA | JEQ_IMM | JNE_IMM)
}

#[test]
fn jumps_land_on_what_they_name() {
    let p = program(7, 9, LAYOUT);
    let pass = p.len() - 2;
    assert_eq!(p[pass], insn(MOV64_IMM, R0, 0, 0, SK_PASS));
    assert_eq!(p.last().unwrap().code, EXIT);
    let other = p
        .iter()
        .position(|i| *i == insn(ST_W, R10, 0, -8, 0))
        .expect("the key 0 of the current generation");
    let short = p
        .iter()
        .position(|i| *i == insn(LDX_B, R2, R10, BUF + 1, 0))
        .expect("a short header's ID");
    let ours = short + 2;
    assert_eq!(p[ours], insn(MOV64_REG, R1, R2, 0, 0));
    let targets: Vec<(usize, usize)> = (0..p.len())
        .filter(|&i| is_jump(&p[i]))
        .map(|i| (i, target(&p, i)))
        .collect();
    let hash = p
        .iter()
        .rposition(|i| *i == insn(MOV64_REG, R2, R7, 0, 0))
        .expect("the hash's zone count");
    // The failed load, a long header of another length, another layout: other; a short
    // header; a long one on to the check; a selection made, no current generation, none of
    // its zones: pass; no entry for the CPU, or no zone on it: hash; the CPU's zone
    // selected: pass.
    let want = [
        other, short, other, ours, other, pass, pass, pass, hash, hash, pass,
    ];
    assert_eq!(
        targets.iter().map(|t| t.1).collect::<Vec<_>>(),
        want,
        "{targets:?}"
    );
    // A long header's zone follows the version and the ID's length.
    assert_eq!(p[short - 2], insn(LDX_B, R3, R10, BUF + 6 + 2, 0));
    assert_eq!(p[short + 1], insn(LDX_B, R3, R10, BUF + 1 + 2, 0));
    // Both maps, in LD_IMM64's first slot.
    let maps: Vec<i32> = p
        .iter()
        .filter(|i| i.code == LD_IMM64)
        .map(|i| i.imm)
        .collect();
    assert_eq!(maps, [7, 9, 9, 7, 7]);
    // The CPU's entry is at key 1 + CPU.
    let cpu = p
        .iter()
        .position(|i| *i == insn(CALL, 0, 0, 0, FN_GET_SMP_PROCESSOR_ID))
        .expect("the receiving CPU");
    assert_eq!(p[cpu + 1], insn(ADD64_IMM, R0, 0, 0, 1));
    // The generation bit (0x10) becomes 256.
    assert!(p.contains(&insn(LSH64_IMM, R1, 0, 0, 4)));
}

#[test]
fn the_copy_stays_clear_of_the_keys() {
    // Bytes [BUF, BUF + len) of the stack hold the packet's copy, [-8, 0) the two keys.
    for zone_byte in 1..20u8 {
        let l = CidLayout {
            zone_byte,
            len: 21,
            ..LAYOUT
        };
        assert!(i32::from(BUF) + read_len(l) <= -8, "zone byte {zone_byte}");
    }
}

#[test]
fn layouts_whose_fields_overlap_are_refused() {
    let s = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    for bad in [
        CidLayout {
            zone_byte: 12,
            ..LAYOUT
        },
        CidLayout {
            epoch_bit: 0x20,
            ..LAYOUT
        },
        CidLayout {
            epoch_bit: 0x18,
            ..LAYOUT
        },
    ] {
        let e = QuicSteering::attach(&[&s], &[], bad, 0).unwrap_err();
        assert!(e.to_string().contains("outside the ID"), "{e}");
    }
}

#[test]
fn ids_travel_as_text() {
    let ids = Ids {
        sockets: 12,
        current: 13,
        epoch: 1,
    };
    assert_eq!(ids.to_string().parse::<Ids>(), Ok(ids));
    for bad in ["", "1:2", "1:2:2", "1:2:0:4", "a:2:0"] {
        assert_eq!(bad.parse::<Ids>(), Err(()), "{bad}");
    }
}
