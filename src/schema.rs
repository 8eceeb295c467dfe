//! Table definitions, kept by hand so ids are BigInt on both engines (print-schema says Integer
//! on SQLite). Columns maintained only by the database (PostgreSQL's `tx`) are left out on purpose.

diesel::table! {
    groups (group_id) {
        group_id -> BigInt,
        name -> Text,
        owner_id -> Text,
        last_msg_id -> BigInt,
        created_at -> Timestamp,
        last_activity_at -> Timestamp,
        member_count -> BigInt,
    }
}

diesel::table! {
    group_members (group_id, user_id) {
        group_id -> BigInt,
        user_id -> Text,
        role -> Text,
        joined_after_msg_id -> BigInt,
        last_ack_msg_id -> BigInt,
        last_read_msg_id -> BigInt,
        joined_at -> Timestamp,
        delivered_msg_id -> BigInt,
        own_msgs_after_read -> BigInt,
    }
}

diesel::table! {
    group_msgs (id) {
        id -> BigInt,
        group_id -> BigInt,
        msg_id -> BigInt,
        sender_id -> Text,
        client_msg_id -> Text,
        content -> Text,
        created_at -> Timestamp,
        kind -> Text,
        target_msg_id -> Nullable<BigInt>,
        reply_to_msg_id -> Nullable<BigInt>,
        mention_all -> Bool,
        ext -> Nullable<Text>,
        detail -> Nullable<Text>,
        edited_at -> Nullable<Timestamp>,
        retracted_at -> Nullable<Timestamp>,
    }
}

diesel::table! {
    mentions (group_id, msg_id, user_id) {
        group_id -> BigInt,
        msg_id -> BigInt,
        user_id -> Text,
    }
}

diesel::joinable!(group_members -> groups (group_id));
diesel::joinable!(group_msgs -> groups (group_id));
diesel::allow_tables_to_appear_in_same_query!(
    groups,
    group_members,
    group_msgs,
    receipt_events,
    devices,
    device_cursors,
    member_events,
    mentions,
    push_targets,
    push_group_state,
);

diesel::table! {
    receipt_events (id) {
        id -> BigInt,
        group_id -> BigInt,
        reader_id -> Text,
        from_msg_id -> BigInt,
        to_msg_id -> BigInt,
        created_at -> Timestamp,
    }
}

diesel::joinable!(receipt_events -> groups (group_id));

diesel::table! {
    devices (device_id) {
        device_id -> Text,
        user_id -> Text,
        created_at -> Timestamp,
        last_seen_at -> Timestamp,
        removed_at -> Nullable<Timestamp>,
        tokens_refused_until -> Nullable<Timestamp>,
    }
}

diesel::table! {
    device_cursors (group_id, user_id, device_id) {
        group_id -> BigInt,
        user_id -> Text,
        device_id -> Text,
        last_ack_msg_id -> BigInt,
    }
}

diesel::joinable!(device_cursors -> devices (device_id));

diesel::table! {
    member_events (id) {
        id -> BigInt,
        user_id -> Text,
        group_id -> BigInt,
        kind -> Text,
        device_id -> Text,
        created_at -> Timestamp,
    }
}

diesel::table! {
    push_targets (device_id) {
        device_id -> Text,
        user_id -> Text,
        platform -> Text,
        token -> Text,
        registered_at -> Timestamp,
        last_built_at -> Nullable<Timestamp>,
        built_count -> BigInt,
        pending_key -> Nullable<Text>,
        pending_body -> Nullable<Text>,
        pending_since -> Nullable<Timestamp>,
        attempts -> BigInt,
        next_attempt_at -> Nullable<Timestamp>,
        lease_owner -> Nullable<Text>,
        lease_until -> Nullable<Timestamp>,
    }
}

diesel::table! {
    push_group_state (device_id, group_id) {
        device_id -> Text,
        group_id -> BigInt,
        user_id -> Text,
        notified_msg_id -> BigInt,
        notified_unread -> BigInt,
    }
}
