"""Host-side models: the other end of the chip's streams (TLP link, PCIe root complex, UART host) and the driver's simulator backends."""
