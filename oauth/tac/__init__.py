"""The OAuth Transaction Authorization Challenge (draft-rosomakho-oauth-txn-challenge-00): Reviewer as
the authorization server. `challenge` verifies a resource's challenge, `services` accepts it and
answers polls, `views` is the transaction authorization endpoint."""
