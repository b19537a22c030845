"""Read-side domain helpers shared by the agent and the evidence collector: the kernel-log Xid
parser.
"""
