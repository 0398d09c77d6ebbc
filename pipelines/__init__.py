"""Pure transforms: DataFrame in, DataFrame out (parsing, cleaning, joins, waste, failure causes)."""
