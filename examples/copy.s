rhm ub=0, rows=4, host=0x0     ; 4 rows of 8 bytes from host offset 0
whm ub=0, rows=4, host=0x100   ; back to host offset 0x100
halt
