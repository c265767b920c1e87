"""Pipeline stages. Each is a small class built from its artifact (``from_path``) with no global state;
the Selector passes plain data (strings, id lists, float arrays) between them."""
