"""The reviewer pages over HTTP: views, forms, page builders and the queries behind the lists."""
