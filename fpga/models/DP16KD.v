// Behavioural model of the Lattice ECP5 DP16KD block RAM (16 Kbit, 18 Kbit
// with the ninth bits), for simulating netlists of synth_ecp5, whose own
// cell models have the DP16KD as a black box only. It covers the
// configurations yosys's memory mapping (share/lattice/brams_map_16kd.v)
// makes:
//   * true dual port, each port 9 or 18 bits wide (1024 x 18 or 2048 x 9),
//     the address in ADx[13:4] (x18) or ADx[13:3] (x9); in x18 a write
//     enables its two 9-bit bytes with ADx[0] and ADx[1];
//   * pseudo dual port, 36 bits (512 x 36): port A writes {DIB, DIA} at
//     ADA[13:5] with byte enables ADA[3:0], port B reads {DOB, DOA} at
//     ADB[13:5];
//   * WRITEMODE NORMAL (a write leaves the port's output as it was),
//     WRITETHROUGH (shows the new word), READBEFOREWRITE (the old word);
//   * RESETMODE SYNC or ASYNC: RSTx clears the port's output (a sync reset
//     regardless of CEx, and it blocks that port's write);
//   * CEx gates the port's clock; the contents from INITVAL_00..3F.
// A x36 word is the x18 words 2k (DIA/DOA) and 2k+1 (DIB/DOB); a x18 word
// the x9 words 2k (bits 8:0) and 2k+1 (bits 17:9), as yosys assumes.
// Outside that subset (1, 2 or 4-bit ports, output registers REGMODE
// OUTREG, chip selects other than 0b000, an inverted clock) the model stops
// the simulation at time zero with a message. Simultaneous access of one
// word from both ports reads the old word on the reading port.
module DP16KD(
    input DIA17, DIA16, DIA15, DIA14, DIA13, DIA12, DIA11, DIA10, DIA9, DIA8, DIA7, DIA6, DIA5, DIA4, DIA3, DIA2, DIA1, DIA0,
    input ADA13, ADA12, ADA11, ADA10, ADA9, ADA8, ADA7, ADA6, ADA5, ADA4, ADA3, ADA2, ADA1, ADA0,
    input CEA, OCEA, CLKA, WEA, RSTA,
    input CSA2, CSA1, CSA0,
    output DOA17, DOA16, DOA15, DOA14, DOA13, DOA12, DOA11, DOA10, DOA9, DOA8, DOA7, DOA6, DOA5, DOA4, DOA3, DOA2, DOA1, DOA0,
    input DIB17, DIB16, DIB15, DIB14, DIB13, DIB12, DIB11, DIB10, DIB9, DIB8, DIB7, DIB6, DIB5, DIB4, DIB3, DIB2, DIB1, DIB0,
    input ADB13, ADB12, ADB11, ADB10, ADB9, ADB8, ADB7, ADB6, ADB5, ADB4, ADB3, ADB2, ADB1, ADB0,
    input CEB, OCEB, CLKB, WEB, RSTB,
    input CSB2, CSB1, CSB0,
    output DOB17, DOB16, DOB15, DOB14, DOB13, DOB12, DOB11, DOB10, DOB9, DOB8, DOB7, DOB6, DOB5, DOB4, DOB3, DOB2, DOB1, DOB0
);
    parameter DATA_WIDTH_A = 18;
    parameter DATA_WIDTH_B = 18;
    parameter REGMODE_A = "NOREG";
    parameter REGMODE_B = "NOREG";
    parameter RESETMODE = "SYNC";
    parameter ASYNC_RESET_RELEASE = "SYNC";
    parameter CSDECODE_A = "0b000";
    parameter CSDECODE_B = "0b000";
    parameter WRITEMODE_A = "NORMAL";
    parameter WRITEMODE_B = "NORMAL";
    parameter CLKAMUX = "CLKA";
    parameter CLKBMUX = "CLKB";
    parameter GSR = "ENABLED";
    parameter INIT_DATA = "STATIC";
    parameter [319:0] INITVAL_00 = 320'h0;
    parameter [319:0] INITVAL_01 = 320'h0;
    parameter [319:0] INITVAL_02 = 320'h0;
    parameter [319:0] INITVAL_03 = 320'h0;
    parameter [319:0] INITVAL_04 = 320'h0;
    parameter [319:0] INITVAL_05 = 320'h0;
    parameter [319:0] INITVAL_06 = 320'h0;
    parameter [319:0] INITVAL_07 = 320'h0;
    parameter [319:0] INITVAL_08 = 320'h0;
    parameter [319:0] INITVAL_09 = 320'h0;
    parameter [319:0] INITVAL_0A = 320'h0;
    parameter [319:0] INITVAL_0B = 320'h0;
    parameter [319:0] INITVAL_0C = 320'h0;
    parameter [319:0] INITVAL_0D = 320'h0;
    parameter [319:0] INITVAL_0E = 320'h0;
    parameter [319:0] INITVAL_0F = 320'h0;
    parameter [319:0] INITVAL_10 = 320'h0;
    parameter [319:0] INITVAL_11 = 320'h0;
    parameter [319:0] INITVAL_12 = 320'h0;
    parameter [319:0] INITVAL_13 = 320'h0;
    parameter [319:0] INITVAL_14 = 320'h0;
    parameter [319:0] INITVAL_15 = 320'h0;
    parameter [319:0] INITVAL_16 = 320'h0;
    parameter [319:0] INITVAL_17 = 320'h0;
    parameter [319:0] INITVAL_18 = 320'h0;
    parameter [319:0] INITVAL_19 = 320'h0;
    parameter [319:0] INITVAL_1A = 320'h0;
    parameter [319:0] INITVAL_1B = 320'h0;
    parameter [319:0] INITVAL_1C = 320'h0;
    parameter [319:0] INITVAL_1D = 320'h0;
    parameter [319:0] INITVAL_1E = 320'h0;
    parameter [319:0] INITVAL_1F = 320'h0;
    parameter [319:0] INITVAL_20 = 320'h0;
    parameter [319:0] INITVAL_21 = 320'h0;
    parameter [319:0] INITVAL_22 = 320'h0;
    parameter [319:0] INITVAL_23 = 320'h0;
    parameter [319:0] INITVAL_24 = 320'h0;
    parameter [319:0] INITVAL_25 = 320'h0;
    parameter [319:0] INITVAL_26 = 320'h0;
    parameter [319:0] INITVAL_27 = 320'h0;
    parameter [319:0] INITVAL_28 = 320'h0;
    parameter [319:0] INITVAL_29 = 320'h0;
    parameter [319:0] INITVAL_2A = 320'h0;
    parameter [319:0] INITVAL_2B = 320'h0;
    parameter [319:0] INITVAL_2C = 320'h0;
    parameter [319:0] INITVAL_2D = 320'h0;
    parameter [319:0] INITVAL_2E = 320'h0;
    parameter [319:0] INITVAL_2F = 320'h0;
    parameter [319:0] INITVAL_30 = 320'h0;
    parameter [319:0] INITVAL_31 = 320'h0;
    parameter [319:0] INITVAL_32 = 320'h0;
    parameter [319:0] INITVAL_33 = 320'h0;
    parameter [319:0] INITVAL_34 = 320'h0;
    parameter [319:0] INITVAL_35 = 320'h0;
    parameter [319:0] INITVAL_36 = 320'h0;
    parameter [319:0] INITVAL_37 = 320'h0;
    parameter [319:0] INITVAL_38 = 320'h0;
    parameter [319:0] INITVAL_39 = 320'h0;
    parameter [319:0] INITVAL_3A = 320'h0;
    parameter [319:0] INITVAL_3B = 320'h0;
    parameter [319:0] INITVAL_3C = 320'h0;
    parameter [319:0] INITVAL_3D = 320'h0;
    parameter [319:0] INITVAL_3E = 320'h0;
    parameter [319:0] INITVAL_3F = 320'h0;

    wire [17:0] dia = {DIA17, DIA16, DIA15, DIA14, DIA13, DIA12, DIA11, DIA10, DIA9, DIA8, DIA7, DIA6, DIA5, DIA4, DIA3, DIA2, DIA1, DIA0};
    wire [17:0] dib = {DIB17, DIB16, DIB15, DIB14, DIB13, DIB12, DIB11, DIB10, DIB9, DIB8, DIB7, DIB6, DIB5, DIB4, DIB3, DIB2, DIB1, DIB0};
    wire [13:0] ada = {ADA13, ADA12, ADA11, ADA10, ADA9, ADA8, ADA7, ADA6, ADA5, ADA4, ADA3, ADA2, ADA1, ADA0};
    wire [13:0] adb = {ADB13, ADB12, ADB11, ADB10, ADB9, ADB8, ADB7, ADB6, ADB5, ADB4, ADB3, ADB2, ADB1, ADB0};
    reg [17:0] doa = 0, dob = 0;
    assign {DOA17, DOA16, DOA15, DOA14, DOA13, DOA12, DOA11, DOA10, DOA9, DOA8, DOA7, DOA6, DOA5, DOA4, DOA3, DOA2, DOA1, DOA0} = doa;
    assign {DOB17, DOB16, DOB15, DOB14, DOB13, DOB12, DOB11, DOB10, DOB9, DOB8, DOB7, DOB6, DOB5, DOB4, DOB3, DOB2, DOB1, DOB0} = dob;

    localparam WIDE = DATA_WIDTH_A == 36;   // pseudo dual port, 36 bits

    reg [17:0] mem [0:1023];

    task load_initval;
        input integer index;
        input [319:0] value;
        integer i;
        for (i = 0; i < 16; i = i + 1)
            mem[index * 16 + i] = value[i * 20 +: 18];
    endtask

    function supported_port;
        input integer width;
        input [8*16-1:0] writemode, regmode, csdecode;
        supported_port = (width == 9 || width == 18)
            && (writemode == "NORMAL" || writemode == "WRITETHROUGH" || writemode == "READBEFOREWRITE")
            && regmode == "NOREG" && csdecode == "0b000";
    endfunction

    initial begin
        if (!(WIDE ? DATA_WIDTH_B == 36 && REGMODE_A == "NOREG" && REGMODE_B == "NOREG"
                     && CSDECODE_A == "0b000" && CSDECODE_B == "0b000"
                   : supported_port(DATA_WIDTH_A, WRITEMODE_A, REGMODE_A, CSDECODE_A)
                     && supported_port(DATA_WIDTH_B, WRITEMODE_B, REGMODE_B, CSDECODE_B))
                || (RESETMODE != "SYNC" && RESETMODE != "ASYNC")
                || CLKAMUX != "CLKA" || CLKBMUX != "CLKB") begin
            $display("DP16KD model: unsupported configuration (widths %0d/%0d, %0s/%0s, %0s/%0s)",
                     DATA_WIDTH_A, DATA_WIDTH_B, REGMODE_A, REGMODE_B, WRITEMODE_A, WRITEMODE_B);
            $finish;
        end
        load_initval(0, INITVAL_00);
        load_initval(1, INITVAL_01);
        load_initval(2, INITVAL_02);
        load_initval(3, INITVAL_03);
        load_initval(4, INITVAL_04);
        load_initval(5, INITVAL_05);
        load_initval(6, INITVAL_06);
        load_initval(7, INITVAL_07);
        load_initval(8, INITVAL_08);
        load_initval(9, INITVAL_09);
        load_initval(10, INITVAL_0A);
        load_initval(11, INITVAL_0B);
        load_initval(12, INITVAL_0C);
        load_initval(13, INITVAL_0D);
        load_initval(14, INITVAL_0E);
        load_initval(15, INITVAL_0F);
        load_initval(16, INITVAL_10);
        load_initval(17, INITVAL_11);
        load_initval(18, INITVAL_12);
        load_initval(19, INITVAL_13);
        load_initval(20, INITVAL_14);
        load_initval(21, INITVAL_15);
        load_initval(22, INITVAL_16);
        load_initval(23, INITVAL_17);
        load_initval(24, INITVAL_18);
        load_initval(25, INITVAL_19);
        load_initval(26, INITVAL_1A);
        load_initval(27, INITVAL_1B);
        load_initval(28, INITVAL_1C);
        load_initval(29, INITVAL_1D);
        load_initval(30, INITVAL_1E);
        load_initval(31, INITVAL_1F);
        load_initval(32, INITVAL_20);
        load_initval(33, INITVAL_21);
        load_initval(34, INITVAL_22);
        load_initval(35, INITVAL_23);
        load_initval(36, INITVAL_24);
        load_initval(37, INITVAL_25);
        load_initval(38, INITVAL_26);
        load_initval(39, INITVAL_27);
        load_initval(40, INITVAL_28);
        load_initval(41, INITVAL_29);
        load_initval(42, INITVAL_2A);
        load_initval(43, INITVAL_2B);
        load_initval(44, INITVAL_2C);
        load_initval(45, INITVAL_2D);
        load_initval(46, INITVAL_2E);
        load_initval(47, INITVAL_2F);
        load_initval(48, INITVAL_30);
        load_initval(49, INITVAL_31);
        load_initval(50, INITVAL_32);
        load_initval(51, INITVAL_33);
        load_initval(52, INITVAL_34);
        load_initval(53, INITVAL_35);
        load_initval(54, INITVAL_36);
        load_initval(55, INITVAL_37);
        load_initval(56, INITVAL_38);
        load_initval(57, INITVAL_39);
        load_initval(58, INITVAL_3A);
        load_initval(59, INITVAL_3B);
        load_initval(60, INITVAL_3C);
        load_initval(61, INITVAL_3D);
        load_initval(62, INITVAL_3E);
        load_initval(63, INITVAL_3F);
    end

    // One clock edge of a port in the true dual port mode, x9 or x18: the
    // write (NBA, so the other port reads the word before it this edge) and
    // the port's next output, `out` holding its present one.
    task port_access;
        input integer width;
        input [8*16-1:0] writemode;
        input [13:0] address;
        input [17:0] data;
        input write;
        inout [17:0] out;
        reg [17:0] stored, merged;
        reg [1:0] bytes;
        begin
            stored = mem[address[13:4]];
            if (width == 9) begin
                bytes = address[3] ? 2'b10 : 2'b01;
                merged = {data[8:0], data[8:0]};
            end else begin
                bytes = address[1:0];
                merged = data;
            end
            merged = {bytes[1] ? merged[17:9] : stored[17:9], bytes[0] ? merged[8:0] : stored[8:0]};
            if (write) mem[address[13:4]] <= merged;
            if (write && writemode == "NORMAL")
                out = out;
            else if (width == 9)
                out = {9'b0, address[3] ? (write && writemode == "WRITETHROUGH" ? merged[17:9] : stored[17:9])
                                        : (write && writemode == "WRITETHROUGH" ? merged[8:0] : stored[8:0])};
            else
                out = write && writemode == "WRITETHROUGH" ? merged : stored;
        end
    endtask

    wire reset_a = RSTA === 1'b1, reset_b = RSTB === 1'b1;
    generate
        if (WIDE) begin
            always @(posedge CLKA)
                if (CEA && WEA && !reset_a) begin : write36
                    reg [9:0] row;
                    row = {ada[13:5], 1'b0};
                    if (ada[0]) mem[row][8:0] <= dia[8:0];
                    if (ada[1]) mem[row][17:9] <= dia[17:9];
                    if (ada[2]) mem[row + 1][8:0] <= dib[8:0];
                    if (ada[3]) mem[row + 1][17:9] <= dib[17:9];
                end
            if (RESETMODE == "ASYNC") begin
                always @(posedge CLKB, posedge reset_b)
                    if (reset_b) {dob, doa} <= 0;
                    else if (CEB) {dob, doa} <= {mem[{adb[13:5], 1'b1}], mem[{adb[13:5], 1'b0}]};
            end else begin
                always @(posedge CLKB)
                    if (reset_b) {dob, doa} <= 0;
                    else if (CEB) {dob, doa} <= {mem[{adb[13:5], 1'b1}], mem[{adb[13:5], 1'b0}]};
            end
        end else begin
            reg [17:0] out_a, out_b;
            if (RESETMODE == "ASYNC") begin
                always @(posedge CLKA, posedge reset_a)
                    if (reset_a) doa <= 0;
                    else if (CEA) begin
                        out_a = doa;
                        port_access(DATA_WIDTH_A, WRITEMODE_A, ada, dia, WEA === 1'b1, out_a);
                        doa <= out_a;
                    end
                always @(posedge CLKB, posedge reset_b)
                    if (reset_b) dob <= 0;
                    else if (CEB) begin
                        out_b = dob;
                        port_access(DATA_WIDTH_B, WRITEMODE_B, adb, dib, WEB === 1'b1, out_b);
                        dob <= out_b;
                    end
            end else begin
                always @(posedge CLKA)
                    if (reset_a) doa <= 0;
                    else if (CEA) begin
                        out_a = doa;
                        port_access(DATA_WIDTH_A, WRITEMODE_A, ada, dia, WEA === 1'b1, out_a);
                        doa <= out_a;
                    end
                always @(posedge CLKB)
                    if (reset_b) dob <= 0;
                    else if (CEB) begin
                        out_b = dob;
                        port_access(DATA_WIDTH_B, WRITEMODE_B, adb, dib, WEB === 1'b1, out_b);
                        dob <= out_b;
                    end
            end
        end
    endgenerate
endmodule
