"""The HTTP rules every face shares: the error table, ranges, conditions, forms, headers."""
