"""Programs for the RTL: fixed program library and the random program generator."""
