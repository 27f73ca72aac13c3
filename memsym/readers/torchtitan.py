"""placeholder"""
def read_torchtitan_toml(*a, **k):
    raise NotImplementedError
