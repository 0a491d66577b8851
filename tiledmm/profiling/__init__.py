"""Profile mode's lower floor: the counters (counted runs, Profile), the time model, the device
presets, the registers table and Nsight Compute. tiledmm.profile (count, row_fields,
lesson_table) is the public face above it; nothing here imports tiledmm._core.
"""
