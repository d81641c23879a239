// Behavioural model of the Lattice ECP5 MULT18X18D (sysDSP usage guide,
// TN1267), for simulating designs that instantiate it and synth_ecp5
// netlists (yosys ships its black box only). It covers the subset
// tpu.hdl.multiplier.ECP5Multiplier and yosys's multiply mapping use: 18x18
// multiplication, each operand signed or unsigned per SIGNEDA/SIGNEDB (the
// flag travels through its operand's input register), the A and B input
// registers, the pipeline register after the multiplier and the output
// register, each clocked by CLK0..CLK3 or "NONE" (bypassed) with its own
// clock enable and synchronous reset among CE0..CE3 and RST0..RST3 (reset
// wins over the clock enable). The C input register, the shift chains
// (SOURCEA/SOURCEB, SRIA/SRIB/SROA/SROB), the register and SIGNEDP outputs,
// the bypass mode and asynchronous reset are not modelled: a design that
// sets one of them stops at time zero with a message, one that drives
// SOURCEA or SOURCEB high stops then; the unmodelled outputs are not ports.
module MULT18X18D(
    input A0, A1, A2, A3, A4, A5, A6, A7, A8, A9, A10, A11, A12, A13, A14, A15, A16, A17,
    input B0, B1, B2, B3, B4, B5, B6, B7, B8, B9, B10, B11, B12, B13, B14, B15, B16, B17,
    input C0, C1, C2, C3, C4, C5, C6, C7, C8, C9, C10, C11, C12, C13, C14, C15, C16, C17,
    input SIGNEDA, SIGNEDB, SOURCEA, SOURCEB,
    input CLK0, CLK1, CLK2, CLK3, CE0, CE1, CE2, CE3, RST0, RST1, RST2, RST3,
    output P0, P1, P2, P3, P4, P5, P6, P7, P8, P9, P10, P11, P12, P13, P14, P15, P16, P17,
    output P18, P19, P20, P21, P22, P23, P24, P25, P26, P27, P28, P29, P30, P31, P32, P33,
    output P34, P35
);
    parameter REG_INPUTA_CLK = "NONE";
    parameter REG_INPUTA_CE = "CE0";
    parameter REG_INPUTA_RST = "RST0";
    parameter REG_INPUTB_CLK = "NONE";
    parameter REG_INPUTB_CE = "CE0";
    parameter REG_INPUTB_RST = "RST0";
    parameter REG_INPUTC_CLK = "NONE";
    parameter REG_INPUTC_CE = "CE0";
    parameter REG_INPUTC_RST = "RST0";
    parameter REG_PIPELINE_CLK = "NONE";
    parameter REG_PIPELINE_CE = "CE0";
    parameter REG_PIPELINE_RST = "RST0";
    parameter REG_OUTPUT_CLK = "NONE";
    parameter REG_OUTPUT_CE = "CE0";
    parameter REG_OUTPUT_RST = "RST0";
    parameter CLK0_DIV = "ENABLED";
    parameter CLK1_DIV = "ENABLED";
    parameter CLK2_DIV = "ENABLED";
    parameter CLK3_DIV = "ENABLED";
    parameter HIGHSPEED_CLK = "NONE";
    parameter GSR = "ENABLED";
    parameter CAS_MATCH_REG = "FALSE";
    parameter SOURCEB_MODE = "B_SHIFT";
    parameter MULT_BYPASS = "DISABLED";
    parameter RESETMODE = "SYNC";

    wire [17:0] a = {A17, A16, A15, A14, A13, A12, A11, A10, A9, A8, A7, A6, A5, A4, A3, A2, A1, A0};
    wire [17:0] b = {B17, B16, B15, B14, B13, B12, B11, B10, B9, B8, B7, B6, B5, B4, B3, B2, B1, B0};
    wire [3:0] clk = {CLK3, CLK2, CLK1, CLK0};
    wire [3:0] ce = {CE3, CE2, CE1, CE0};
    wire [3:0] rst = {RST3, RST2, RST1, RST0};

    function integer index;  // "CLK2" / "CE2" / "RST2" -> 2, "NONE" -> -1
        input [8*4-1:0] name;
        index = name == "NONE" ? -1 : name[7:0] - "0";
    endfunction

    initial begin
        if (REG_INPUTC_CLK != "NONE" || RESETMODE != "SYNC" || HIGHSPEED_CLK != "NONE"
                || SOURCEB_MODE != "B_SHIFT" || MULT_BYPASS != "DISABLED") begin
            $display("MULT18X18D model: a parameter outside the modelled subset is set");
            $finish;
        end
    end

    localparam A_CLK = index(REG_INPUTA_CLK), A_CE = index(REG_INPUTA_CE), A_RST = index(REG_INPUTA_RST);
    localparam B_CLK = index(REG_INPUTB_CLK), B_CE = index(REG_INPUTB_CE), B_RST = index(REG_INPUTB_RST);
    localparam M_CLK = index(REG_PIPELINE_CLK), M_CE = index(REG_PIPELINE_CE), M_RST = index(REG_PIPELINE_RST);
    localparam P_CLK = index(REG_OUTPUT_CLK), P_CE = index(REG_OUTPUT_CE), P_RST = index(REG_OUTPUT_RST);

    // Each register is bypassed when its clock is "NONE". The sign flags
    // travel with their operands.
    reg [18:0] a_q = 0, b_q = 0;
    reg [35:0] m_q = 0, p_q = 0;
    wire [18:0] a_r = A_CLK < 0 ? {SIGNEDA, a} : a_q;
    wire [18:0] b_r = B_CLK < 0 ? {SIGNEDB, b} : b_q;

    // Each operand widened to 36 bits per its sign flag, then multiplied.
    wire [35:0] a_wide = {{18{a_r[18] & a_r[17]}}, a_r[17:0]};
    wire [35:0] b_wide = {{18{b_r[18] & b_r[17]}}, b_r[17:0]};
    wire [35:0] product = a_wide * b_wide;
    wire [35:0] m_r = M_CLK < 0 ? product : m_q;
    wire [35:0] p_r = P_CLK < 0 ? m_r : p_q;

    always @(SOURCEA, SOURCEB)
        if (SOURCEA === 1'b1 || SOURCEB === 1'b1) begin
            $display("MULT18X18D model: SOURCEA/SOURCEB (the shift chains) are not modelled");
            $finish;
        end

    generate
        if (A_CLK >= 0)
            always @(posedge clk[A_CLK])
                if (rst[A_RST]) a_q <= 0; else if (ce[A_CE]) a_q <= {SIGNEDA, a};
        if (B_CLK >= 0)
            always @(posedge clk[B_CLK])
                if (rst[B_RST]) b_q <= 0; else if (ce[B_CE]) b_q <= {SIGNEDB, b};
        if (M_CLK >= 0)
            always @(posedge clk[M_CLK])
                if (rst[M_RST]) m_q <= 0; else if (ce[M_CE]) m_q <= product;
        if (P_CLK >= 0)
            always @(posedge clk[P_CLK])
                if (rst[P_RST]) p_q <= 0; else if (ce[P_CE]) p_q <= m_r;
    endgenerate

    assign {P35, P34, P33, P32, P31, P30, P29, P28, P27, P26, P25, P24, P23, P22, P21, P20, P19, P18,
            P17, P16, P15, P14, P13, P12, P11, P10, P9, P8, P7, P6, P5, P4, P3, P2, P1, P0} = p_r;
endmodule
