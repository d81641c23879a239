"""scripts/verilated_cpp_parts.py: a model's C++ counted by part of the design."""

from script_loader import load_script


parts = load_script("verilated_cpp_parts")


def test_signal_paths_map_to_parts():
    glue = "array glue: the row instances' ports"
    assert parts.part_of("core.engine.array.row_17.transit_tmp__05FV") == glue
    assert parts.part_of("core.engine.array.__Vcellinp__row_3__act") == glue
    assert parts.part_of("core.engine.array.below__024186") == glue
    assert parts.part_of("core.engine.array.deskew.lanes.lane5__v0") == "staircases (skews, deskew)"
    assert parts.part_of("core.engine.array.valid_d3") == "rest of the array"
    assert parts.part_of("core.act.pipeline.pooling_2.line") == "pooling lanes"
    assert parts.part_of("core.act.pipeline.requantizer4.product") == "rest of the activation pipeline"
    assert parts.part_of("core.sequencer.decoder.x") == parts.OTHER


def test_class_files_count_for_their_module():
    assert parts.class_part("Vtop_tpu_systolic_row_64x22__12.cpp").startswith("rows")
    assert parts.class_part("Vtop_tpu_staircase_128x1_0_1__Slow.cpp").startswith("staircases")
    assert parts.class_part("Vtop_tpu_ram_1024x8_rt.cpp") == parts.OTHER
    assert parts.class_part("Vtop___024root__3.cpp") is None
    assert parts.class_part("Vtop__Syms__Slow.cpp") is None


def test_breakdown_of_a_small_model(tmp_path):
    (tmp_path / "Vtop___024root__0.cpp").write_text(
        "void f() {\n"                                                     # 11 bytes, no signal yet
        "    vlSelf->tpu_chip__DOT__core__DOT__engine__DOT__array__DOT__row_2__DOT__x = 0;\n"
        "        // continued\n"                                           # the line before's part
        "    vlSelf->tpu_chip__DOT__core__DOT__act__DOT__pipeline__DOT__pooling_0__DOT__y = 1;\n")
    (tmp_path / "Vtop_tpu_staircase_8x8_1_1.cpp").write_text("x" * 100)
    (tmp_path / "Vtpu_systolic_row_8x19").mkdir()
    (tmp_path / "Vtpu_systolic_row_8x19" / "Vtpu_systolic_row_8x19.cpp").write_text("y" * 50)
    sizes, files = parts.breakdown(tmp_path)
    assert files == 3
    lines = (tmp_path / "Vtop___024root__0.cpp").read_text().splitlines(keepends=True)
    assert sizes == {parts.OTHER: len(lines[0]),
                     "array glue: the row instances' ports": len(lines[1]) + len(lines[2]),
                     "pooling lanes": len(lines[3]),
                     "staircases (skews, deskew)": 100,
                     "library Vtpu_systolic_row_8x19": 50}


def test_refuses_a_directory_without_cpp(tmp_path, capsys):
    try:
        parts.main([str(tmp_path)])
    except SystemExit as stop:
        assert stop.code == 2
    assert "holds no .cpp files" in capsys.readouterr().err
