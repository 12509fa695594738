"""Small end-to-end runs behind ``hyperx demo``."""
