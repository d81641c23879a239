"""The Python link-format conversions of tpu.sim.host.tlp_link."""

import random

import pytest
from cocotbext.pcie.core.tlp import Tlp, TlpType

from conftest import base_seed
from tpu.sim.testbenches.tb_tlp import random_tlp
from tpu.sim.host.tlp_link import (beats_to_tlp, header_from_tlp, tlp_from_header, tlp_to_beats,
                              tlp_to_words)


def test_word_byte_order():
    tlp = Tlp()
    tlp.fmt_type = TlpType.MEM_WRITE
    tlp.address = 0x1234_5678
    tlp.set_data(bytes([1, 2, 3, 4, 5, 6, 7, 8]))
    words = tlp_to_words(tlp)
    assert words[0] >> 24 == 0x40          # header byte 0: Fmt/Type in bits 31:24
    assert words[0] & 0x3FF == 2           # Length
    assert words[2] == 0x1234_5678
    assert words[3:] == [0x0403_0201, 0x0807_0605]  # payload byte 0 in bits 7:0


@pytest.mark.parametrize("link_dw", [1, 2, 4, 8])
def test_round_trip(link_dw):
    seed = base_seed()
    print(f"seed {seed}: replay with TPU_SEED={seed}")
    rng = random.Random(seed)
    for _ in range(300):
        tlp = random_tlp(rng, 64)
        digest = None
        if rng.random() < 0.2:
            tlp.td, digest = True, rng.randrange(1 << 32)
        beats = tlp_to_beats(tlp, link_dw, digest=digest)
        assert all(b.keep == (1 << link_dw) - 1 and not b.last for b in beats[:-1])
        assert beats[-1].last
        back = beats_to_tlp(beats)
        assert back == tlp, f"[seed {seed}]"
        assert beats_to_tlp([tuple(b) for b in beats]) == tlp
        assert beats_to_tlp([b._asdict() for b in beats]) == tlp
        header = header_from_tlp(tlp)
        again = tlp_from_header(header, tlp.data if tlp.has_data() else b"")
        assert again == tlp and header_from_tlp(again) == header, f"[seed {seed}]"


def test_unrepresentable():
    tlp = Tlp()
    tlp.fmt_type = TlpType.MEM_READ
    tlp.tag = 0x100
    with pytest.raises(ValueError):
        header_from_tlp(tlp)


@pytest.mark.parametrize("link_dw", [1, 2, 4, 8])
def test_link_beat_packing_is_the_rtl_layout(link_dw):
    """pack_link_beat / unpack_link_beat (plain integers, no Amaranth on the
    host side) lay a beat out exactly as the RTL's `LinkBeat` does."""
    from tpu.hdl.tlp import LinkBeat
    from tpu.sim.host.streams import pack_fields
    from tpu.sim.host.tlp_link import Beat, pack_link_beat, unpack_link_beat
    seed = base_seed()
    print(f"seed {seed}: replay with TPU_SEED={seed}")
    rng = random.Random(seed)
    layout = LinkBeat(link_dw)
    for _ in range(300):
        beat = Beat(rng.getrandbits(32 * link_dw), rng.getrandbits(link_dw), rng.getrandbits(1))
        word = pack_link_beat(beat, link_dw)
        assert word == pack_fields(layout, beat._asdict()), f"[seed {seed}] {beat}"
        assert unpack_link_beat(word, link_dw) == beat, f"[seed {seed}] {beat}"
    # Fields wider than the layout are cut to it, as the RTL port would.
    assert pack_link_beat((1 << 32 * link_dw, 1 << link_dw, 2), link_dw) == 0


@pytest.mark.parametrize("link_dw", [1, 2, 4, 8])
def test_packed_beats_are_the_packed_beats_of_the_words(link_dw):
    """packed_link_beats (a packet's beats made from its bytes at once, as the
    simulated host drives them) equals pack_link_beat of each of
    words_to_beats, for packets of every length, none included."""
    from tpu.sim.host.tlp_link import pack_link_beat, packed_link_beats, words_to_beats
    seed = base_seed()
    print(f"seed {seed}: replay with TPU_SEED={seed}")
    rng = random.Random(seed)
    for n in [0, 1, link_dw, link_dw + 1, *(rng.randint(2, 140) for _ in range(200))]:
        words = [rng.getrandbits(32) for _ in range(n)]
        assert packed_link_beats(words, link_dw) == \
            [pack_link_beat(beat, link_dw) for beat in words_to_beats(words, link_dw)], \
            f"[seed {seed}] {n} words"
