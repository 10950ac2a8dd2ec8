"""Management-tool look-alikes for the emulated cards: ``cnmon`` (MLU) and ``brsmi`` (SUPA).

They show the cards that ``CARDSIM_DEVICES`` and ``CARDSIM_PRESET`` describe (as the
runtime would emulate them) and what running emulator processes hold on them, read from
the status files the driver shim keeps (driver_shim/src/StatusBoard.h). ``cards`` is the
shared part: presets, status files, topology. Nothing here imports torch, so the tools
start fast.
"""
