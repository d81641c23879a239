; Two-layer MLP on the 8x8 chip: y = requant(relu(requant(x W1 + b1)) W2 + b2)
; x: 16 x 24 int8, W1: 24 x 24 (3x3 tiles), W2: 24 x 16 (3x2 tiles)
; UB rows: x 0..47, h 48..95, y 96..127, LDQ tables 128..172
; activations in column blocks of 8: block k is 16 UB rows

rhm   ub=0, rows=48, host=0x10000                              ; x, column-blocked
rhm   ub=128, rows=45, host=0x20000                            ; 5 LDQ tables (bias, multiplier, shift)

; layer 1: 3 K tiles accumulate into each of 3 N tiles
rw    tile=0, count=3                                          ; W1 column block 0: its 3 K tiles
mmc   ub=0, rows=16, acc=0, switch                             ; acc[0..15] = block 0 x W1[0,0]
mmc   ub=16, rows=16, acc=0, switch, accumulate                ; acc[0..15] += block 1 x W1[1,0]
mmc   ub=32, rows=16, acc=0, switch, accumulate                ; acc[0..15] += block 2 x W1[2,0]
rw    tile=3, count=3                                          ; W1 column block 1: its 3 K tiles
mmc   ub=0, rows=16, acc=16, switch                            ; acc[16..31] = block 0 x W1[0,1]
mmc   ub=16, rows=16, acc=16, switch, accumulate               ; acc[16..31] += block 1 x W1[1,1]
mmc   ub=32, rows=16, acc=16, switch, accumulate               ; acc[16..31] += block 2 x W1[2,1]
rw    tile=6, count=3                                          ; W1 column block 2: its 3 K tiles
mmc   ub=0, rows=16, acc=32, switch                            ; acc[32..47] = block 0 x W1[0,2]
mmc   ub=16, rows=16, acc=32, switch, accumulate               ; acc[32..47] += block 1 x W1[1,2]
mmc   ub=32, rows=16, acc=32, switch, accumulate               ; acc[32..47] += block 2 x W1[2,2]
cfg   reg=out_zero_point, value=-10                            ; zero point of h
ldq   ub=128                                                   ; bias, multiplier, shift of N tile 0
act   acc=0, ub=48, rows=16, func=relu                         ; h block 0
ldq   ub=137                                                   ; bias, multiplier, shift of N tile 1
act   acc=16, ub=64, rows=16, func=relu                        ; h block 1
ldq   ub=146                                                   ; bias, multiplier, shift of N tile 2
act   acc=32, ub=80, rows=16, func=relu                        ; h block 2

; layer 2: 3 K tiles accumulate into each of 2 N tiles
rw    tile=9, count=3                                          ; W2 column block 0: its 3 K tiles
mmc   ub=48, rows=16, acc=0, switch                            ; acc[0..15] = block 0 x W2[0,0]
mmc   ub=64, rows=16, acc=0, switch, accumulate                ; acc[0..15] += block 1 x W2[1,0]
mmc   ub=80, rows=16, acc=0, switch, accumulate                ; acc[0..15] += block 2 x W2[2,0]
rw    tile=12, count=3                                         ; W2 column block 1: its 3 K tiles
mmc   ub=48, rows=16, acc=16, switch                           ; acc[16..31] = block 0 x W2[0,1]
mmc   ub=64, rows=16, acc=16, switch, accumulate               ; acc[16..31] += block 1 x W2[1,1]
mmc   ub=80, rows=16, acc=16, switch, accumulate               ; acc[16..31] += block 2 x W2[2,1]
cfg   reg=out_zero_point, value=4                              ; zero point of y
ldq   ub=155                                                   ; bias, multiplier, shift of N tile 0
act   acc=0, ub=96, rows=16                                    ; y block 0
ldq   ub=164                                                   ; bias, multiplier, shift of N tile 1
act   acc=16, ub=112, rows=16                                  ; y block 1

whm   ub=96, rows=32, host=0x30000                             ; y, column-blocked
halt
