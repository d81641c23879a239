"""The errors of the instruction set: a field out of its range (`FieldError`)
and an instruction a hardware decoder faults on (`IllegalInstruction`)."""

from .codes import Fault, INSTRUCTION_BYTES


__all__ = ["FieldError", "IllegalInstruction"]


class FieldError(ValueError):
    """An instruction field has a value this ISA does not allow.

    Attributes
    ----------
    field : str
        The field's name.
    """

    def __init__(self, field, message):
        super().__init__(message)
        self.field = field


class IllegalInstruction(ValueError):
    """An instruction word the hardware rejects with ILLEGAL_OPCODE or ILLEGAL_FIELD.

    Attributes
    ----------
    fault : Fault
    message : str
        What is wrong, naming the field or bits.
    field : str or None
        The bad field, if it has a name.
    index : int or None
        Index of the instruction in its program (set by `decode_program`).
    """

    def __init__(self, fault, message, field=None, index=None):
        self.fault = Fault(fault)
        self.message = message
        self.field = field
        self.index = index
        super().__init__(str(self))

    def __str__(self):
        where = ""
        if self.index is not None:
            where = f"instruction {self.index} (offset 0x{self.index * INSTRUCTION_BYTES:x}): "
        return f"{where}{self.message} [{self.fault.name}]"
