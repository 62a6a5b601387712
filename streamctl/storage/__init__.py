"""The log on disk: record lines, segment files, a log folder, reading, appending, partitioning.

The bottom layer: it imports nothing of streamctl but errors, timeparse and stopflag.
"""
