"""Lemonade's routing policies for router collections: the parser (:mod:`.policy`, with its
conditions and regex rules) and the decision over one request (:mod:`.decision`). Pure."""
